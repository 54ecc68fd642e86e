//! Finding ONNX Runtime's shared library.
//!
//! capsim loads ONNX Runtime at run time (`ort`'s `load-dynamic`), so the library can come from
//! any installation. The search order: an explicit path (the `--ort-lib` flag), the
//! `ORT_DYLIB_PATH` environment variable, the project-local `.venv` that `scripts/setup.sh`
//! creates (looked for in the working directory, its parents, and the parents of the running
//! executable), then the `onnxruntime` (or `onnxruntime-gpu`) package of the active Python.
//! PyPI wheels ship the library as `onnxruntime/capi/libonnxruntime.so.<version>`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::CalibrateError;

/// The environment variable that names the library, as `ort` itself reads it.
pub const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

/// How the library was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibrarySource {
    /// The caller's explicit path (`--ort-lib`).
    Explicit,
    /// The `ORT_DYLIB_PATH` environment variable.
    EnvironmentVariable,
    /// A project-local `.venv`.
    ProjectVenv,
    /// The active Python's `onnxruntime` package.
    ActivePython,
}

/// A located ONNX Runtime shared library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryLocation {
    /// The library file.
    pub path: PathBuf,
    /// Where it was found.
    pub source: LibrarySource,
}

/// Finds the library. An explicit path or `ORT_DYLIB_PATH` that names a missing file is an
/// error (the user asked for that file); the automatic places are searched in order and the error
/// lists every place looked at.
pub fn locate(explicit: Option<&Path>) -> Result<LibraryLocation, CalibrateError> {
    if let Some(path) = explicit {
        return existing(path, "--ort-lib").map(|path| LibraryLocation {
            path,
            source: LibrarySource::Explicit,
        });
    }
    if let Some(value) = std::env::var_os(ORT_DYLIB_PATH).filter(|v| !v.is_empty()) {
        return existing(Path::new(&value), ORT_DYLIB_PATH).map(|path| LibraryLocation {
            path,
            source: LibrarySource::EnvironmentVariable,
        });
    }
    let mut searched = Vec::new();
    for root in venv_roots() {
        let venv = root.join(".venv");
        searched.push(format!(
            "{}/lib/python*/site-packages/onnxruntime/capi",
            venv.display()
        ));
        if let Some(path) = in_venv(&venv) {
            return Ok(LibraryLocation {
                path,
                source: LibrarySource::ProjectVenv,
            });
        }
    }
    match active_python_package() {
        Some(dir) => {
            let capi = dir.join("capi");
            searched.push(format!("{} (active python3)", capi.display()));
            if let Some(path) = in_capi(&capi) {
                return Ok(LibraryLocation {
                    path,
                    source: LibrarySource::ActivePython,
                });
            }
        }
        None => searched.push("python3 -c 'import onnxruntime' (not importable)".into()),
    }
    Err(CalibrateError::LibraryNotFound { searched })
}

fn existing(path: &Path, origin: &'static str) -> Result<PathBuf, CalibrateError> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        Err(CalibrateError::LibraryMissing {
            path: path.to_path_buf(),
            origin,
        })
    }
}

/// Directories that may hold the project's `.venv`: the working directory and its ancestors,
/// then the executable's ancestors (`target/release/capsim` sits two levels under the root).
fn venv_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    let mut push_ancestors = |start: &Path| {
        for dir in start.ancestors() {
            if !roots.iter().any(|r| r == dir) {
                roots.push(dir.to_path_buf());
            }
        }
    };
    if let Ok(cwd) = std::env::current_dir() {
        push_ancestors(&cwd);
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        push_ancestors(&dir);
    }
    roots.retain(|r| r.join(".venv").is_dir() || r.join("Cargo.toml").is_file());
    roots
}

/// The library inside a virtual environment, if its `onnxruntime` package is installed.
pub fn in_venv(venv: &Path) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    let mut pythons: Vec<PathBuf> = lib
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python"))
        })
        .collect();
    pythons.sort();
    pythons
        .iter()
        .find_map(|p| in_capi(&p.join("site-packages").join("onnxruntime").join("capi")))
}

/// `libonnxruntime.so*` in a wheel's `capi` directory; the versioned name sorts last, and the
/// highest version wins if several are there.
fn in_capi(capi: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(capi)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("libonnxruntime.so")
                    || n == "libonnxruntime.dylib"
                    || n == "onnxruntime.dll"
            })
        })
        .collect();
    found.sort();
    found.pop()
}

/// The directory of the active Python's `onnxruntime` package, if it imports.
fn active_python_package() -> Option<PathBuf> {
    let output = Command::new("python3")
        .args([
            "-c",
            "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))",
        ])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let dir = String::from_utf8(output.stdout).ok()?;
    let dir = PathBuf::from(dir.trim());
    dir.is_dir().then_some(dir)
}

/// The `site-packages` directory that holds a wheel's library (`.../onnxruntime/capi/lib...`).
pub fn site_packages_of(library: &Path) -> Option<&Path> {
    library.parent()?.parent()?.parent()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_venv_with_the_wheel_yields_the_versioned_library() {
        let dir = tempfile::tempdir().expect("tempdir");
        let capi = dir
            .path()
            .join("lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).expect("mkdir");
        std::fs::write(capi.join("libonnxruntime_providers_shared.so"), b"").expect("write");
        std::fs::write(capi.join("libonnxruntime.so.1.31.1"), b"").expect("write");
        assert_eq!(
            in_venv(dir.path()),
            Some(capi.join("libonnxruntime.so.1.31.1"))
        );
    }

    #[test]
    fn a_venv_without_the_wheel_yields_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("lib/python3.11/site-packages")).expect("mkdir");
        assert_eq!(in_venv(dir.path()), None);
    }

    #[test]
    fn an_explicit_missing_path_is_an_error_that_names_it() {
        let err = locate(Some(Path::new("/nonexistent/libonnxruntime.so"))).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("/nonexistent/libonnxruntime.so") && message.contains("--ort-lib"),
            "{message}"
        );
    }
}

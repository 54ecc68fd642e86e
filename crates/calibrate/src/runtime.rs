//! ONNX Runtime, loaded once per process, and sessions on a chosen execution provider.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use ort::environment::Environment;
use ort::session::Session;

use crate::CalibrateError;
use crate::library::{LibraryLocation, site_packages_of};

/// The execution provider the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderChoice {
    /// ONNX Runtime's CPU provider.
    Cpu,
    /// The CUDA provider; an error if it cannot be registered.
    Cuda,
    /// CUDA when it can be registered, otherwise CPU.
    Auto,
}

impl FromStr for ProviderChoice {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "cpu" => Ok(ProviderChoice::Cpu),
            "cuda" => Ok(ProviderChoice::Cuda),
            "auto" => Ok(ProviderChoice::Auto),
            other => Err(format!(
                "unknown execution provider `{other}`: use cpu, cuda or auto"
            )),
        }
    }
}

/// The execution provider a session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// CPU.
    Cpu,
    /// CUDA.
    Cuda,
}

impl Provider {
    /// `cpu` or `cuda`, as profiles record it.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Cpu => "cpu",
            Provider::Cuda => "cuda",
        }
    }
}

/// Which provider a session got, and why CUDA was passed over when `auto` fell back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderDecision {
    /// The provider that runs the model.
    pub provider: Provider,
    /// Why CUDA was not used, when `auto` fell back to CPU.
    pub cuda_unavailable: Option<String>,
}

/// A loaded ONNX Runtime: the shared library and its process-wide environment. Load it once per
/// process: ONNX Runtime allows one environment.
#[derive(Debug)]
pub struct Runtime {
    environment: Environment,
    library: PathBuf,
    version: String,
}

impl Runtime {
    /// Loads the library and creates the environment.
    pub fn load(location: &LibraryLocation) -> Result<Runtime, CalibrateError> {
        let load_error = |reason: String| CalibrateError::LibraryLoad {
            path: location.path.clone(),
            reason,
        };
        let builder = ort::init_from(&location.path).map_err(|e| load_error(e.to_string()))?;
        let environment = builder
            .with_name("capsim")
            .build()
            .map_err(|e| load_error(e.to_string()))?;
        let version = version_of(&location.path, ort::info());
        Ok(Runtime {
            environment,
            library: location.path.clone(),
            version,
        })
    }

    /// The loaded library file.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// ONNX Runtime's version, for example `1.31.1`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Opens a session of `model` on the chosen provider with `intra_threads` intra-op threads
    /// (0: ONNX Runtime's default). The model file must exist (checked here, so the error says so
    /// rather than ONNX Runtime's parse error).
    pub fn open_session(
        &self,
        model: &Path,
        choice: ProviderChoice,
        intra_threads: u32,
    ) -> Result<(Session, ProviderDecision), CalibrateError> {
        if !model.is_file() {
            return Err(CalibrateError::ModelMissing {
                path: model.to_path_buf(),
            });
        }
        let model_error = |reason: String| CalibrateError::ModelLoad {
            path: model.to_path_buf(),
            reason,
        };
        let mut builder =
            Session::builder(&self.environment).map_err(|e| model_error(e.to_string()))?;
        if intra_threads > 0 {
            builder = builder
                .with_intra_threads(intra_threads as usize)
                .map_err(|e| model_error(e.to_string()))?;
        }
        // One model instance runs one batch at a time: no inter-op pool. Idle intra-op threads
        // sleep instead of spinning, so they do not take the CPU from the server's own threads
        // (or from the other instances) between batches; calibration and the live server open
        // their sessions here, so both measure with the same settings.
        builder = builder
            .with_inter_threads(1)
            .map_err(|e| model_error(e.to_string()))?
            .with_intra_op_spinning(false)
            .map_err(|e| model_error(e.to_string()))?
            .with_inter_op_spinning(false)
            .map_err(|e| model_error(e.to_string()))?;
        let mut decision = ProviderDecision {
            provider: Provider::Cpu,
            cuda_unavailable: None,
        };
        if choice != ProviderChoice::Cpu {
            match self.register_cuda(builder) {
                Ok(with_cuda) => {
                    builder = with_cuda;
                    decision.provider = Provider::Cuda;
                }
                Err(failure) => {
                    let (reason, recovered) = *failure;
                    if choice == ProviderChoice::Cuda {
                        return Err(CalibrateError::CudaUnavailable { reason });
                    }
                    builder = recovered;
                    decision.cuda_unavailable = Some(reason);
                }
            }
        }
        let session = builder
            .commit_from_file(model)
            .map_err(|e| model_error(e.to_string()))?;
        Ok((session, decision))
    }

    /// Registers the CUDA provider, failing (with the builder back) instead of silently falling
    /// back to CPU as ONNX Runtime does by default.
    fn register_cuda(
        &self,
        builder: ort::session::builder::SessionBuilder,
    ) -> Result<
        ort::session::builder::SessionBuilder,
        Box<(String, ort::session::builder::SessionBuilder)>,
    > {
        let capi = self.library.parent().unwrap_or(Path::new("."));
        let provider_lib = capi.join("libonnxruntime_providers_cuda.so");
        if !provider_lib.is_file() {
            return Err(Box::new((
                format!(
                    "the ONNX Runtime at {} was built without the CUDA provider ({} is missing); \
                     install onnxruntime-gpu==1.31.1 with its cuda and cudnn extras \
                     (`pip install 'onnxruntime-gpu[cuda,cudnn]==1.31.1'`) and point --ort-lib at its library",
                    self.library.display(),
                    provider_lib.display()
                ),
                builder,
            )));
        }
        preload_cuda_from_wheels(&self.library);
        let cuda = ort::ep::CUDA::default().build().error_on_failure();
        builder.with_execution_providers([cuda]).map_err(|e| {
            Box::new((
                format!(
                    "ONNX Runtime could not register the CUDA provider: {e}; check that `nvidia-smi` \
                     sees a GPU, that its driver supports CUDA 13, and that the cuda and cudnn pip \
                     packages (or LD_LIBRARY_PATH) provide libcudart.so.13 and libcudnn.so.9"
                ),
                e.recover(),
            ))
        })
    }
}

/// Loads CUDA and cuDNN from the NVIDIA pip packages installed beside the wheel, when every
/// library `ort` expects is in one directory each; otherwise leaves it to `LD_LIBRARY_PATH`.
fn preload_cuda_from_wheels(library: &Path) {
    let Some(nvidia) = site_packages_of(library).map(|sp| sp.join("nvidia")) else {
        return;
    };
    let dirs: Vec<PathBuf> = walk_lib_dirs(&nvidia);
    let holding_all = |names: &[&str]| {
        dirs.iter()
            .find(|d| names.iter().all(|n| d.join(n).is_file()))
            .cloned()
    };
    let cuda = holding_all(ort::ep::cuda::CUDA_DYLIBS);
    let cudnn = holding_all(ort::ep::cuda::CUDNN_DYLIBS);
    // A failure here resurfaces, with ONNX Runtime's reason, when the provider is registered.
    let _ = ort::ep::cuda::preload_dylibs(cuda.as_deref(), cudnn.as_deref());
}

/// `lib` directories up to three levels under `root` (`nvidia/<package>/lib`, `nvidia/cu13/lib`).
fn walk_lib_dirs(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "lib") {
                    found.push(path.clone());
                }
                if depth < 3 {
                    stack.push((path, depth + 1));
                }
            }
        }
    }
    found.sort();
    found
}

/// The version from the library's file name (`libonnxruntime.so.1.31.1`), else from the build
/// info string (`git-branch=rel-1.31.1`), else `unknown`.
fn version_of(library: &Path, build_info: &str) -> String {
    let from_name = library
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .and_then(|n| n.strip_prefix("libonnxruntime.so.").map(str::to_string))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()));
    let from_info = || {
        build_info
            .split([',', ' '])
            .find_map(|part| part.trim().strip_prefix("git-branch=rel-"))
            .map(str::to_string)
    };
    from_name
        .or_else(from_info)
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_comes_from_the_file_name_then_the_build_info() {
        assert_eq!(
            version_of(Path::new("/x/libonnxruntime.so.1.31.1"), ""),
            "1.31.1"
        );
        assert_eq!(
            version_of(
                Path::new("/x/libonnxruntime.so"),
                "ORT Build Info: git-branch=rel-1.30.0, git-commit-id=abc"
            ),
            "1.30.0"
        );
        assert_eq!(
            version_of(Path::new("/x/onnxruntime.dll"), "none"),
            "unknown"
        );
    }

    #[test]
    fn provider_choice_parses_and_rejects_with_the_options() {
        assert_eq!("auto".parse::<ProviderChoice>(), Ok(ProviderChoice::Auto));
        let err = "tensorrt".parse::<ProviderChoice>().unwrap_err();
        assert!(err.contains("cpu, cuda or auto"), "{err}");
    }
}

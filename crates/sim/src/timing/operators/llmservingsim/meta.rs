//! The few keys of a bundle's `meta.yaml` the table needs, read without a YAML library.
//!
//! The reader understands block mappings nested by indentation (`key: value`, `key:` opening a
//! nested block), scalars (plain, `'single'` or `"double"` quoted), flow lists of scalars
//! (`[1, 2]`), block lists (`- 1` lines under a key) and `#` comments. Lines it does not
//! understand (multi-line scalars, anchors) are skipped; a key the table needs that sits in such
//! a line is then reported missing, naming the key. Values are checked when asked for, so an
//! unreadable value is an error naming its line and key.

use std::path::{Path, PathBuf};

use super::super::OperatorTableError;

/// One `key: value` line, with its dotted path.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    path: String,
    value: String,
    line: usize,
    /// The `- item` lines under a key with no inline value, with their line numbers.
    items: Vec<(usize, String)>,
}

/// The parsed lines of a `meta.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Meta {
    file: PathBuf,
    entries: Vec<Entry>,
}

impl Meta {
    /// Reads `file`.
    pub(super) fn read(file: &Path) -> Result<Meta, OperatorTableError> {
        let text = std::fs::read_to_string(file).map_err(|source| OperatorTableError::Io {
            path: file.to_path_buf(),
            source,
        })?;
        Ok(Meta::parse(file, &text))
    }

    /// Parses `text`, read from `file`.
    pub(super) fn parse(file: &Path, text: &str) -> Meta {
        let mut entries: Vec<Entry> = Vec::new();
        let mut open: Vec<(usize, String)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = strip_comment(raw);
            let content = line.trim_start_matches(' ');
            if content.trim().is_empty() || content.starts_with("---") {
                continue;
            }
            let indent = line.len() - content.len();
            if let Some(item) = content
                .strip_prefix('-')
                .filter(|r| r.is_empty() || r.starts_with(' '))
            {
                if let Some(last) = entries.last_mut().filter(|e| e.value.is_empty()) {
                    last.items.push((i + 1, item.trim().to_string()));
                }
                continue;
            }
            let Some((key, value)) = split_key(content) else {
                continue;
            };
            while open.last().is_some_and(|(at, _)| *at >= indent) {
                open.pop();
            }
            open.push((indent, unquote(key).to_string()));
            entries.push(Entry {
                path: open
                    .iter()
                    .map(|(_, k)| k.as_str())
                    .collect::<Vec<_>>()
                    .join("."),
                value: value.to_string(),
                line: i + 1,
                items: Vec::new(),
            });
        }
        Meta {
            file: file.to_path_buf(),
            entries,
        }
    }

    fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.path == key)
    }

    fn missing(&self, key: &str) -> OperatorTableError {
        OperatorTableError::Missing {
            path: self.file.clone(),
            what: format!("no key {key}"),
            fix: format!("add {key} (the profiler writes it)"),
        }
    }

    /// An error about the value at `line` under `key`.
    pub(super) fn bad(&self, line: usize, key: &str, reason: String) -> OperatorTableError {
        OperatorTableError::Value {
            path: self.file.clone(),
            row: line,
            column: key.to_string(),
            reason,
        }
    }

    /// The string at `key` (dotted path), unquoted; missing or empty is an error.
    pub(super) fn string(&self, key: &str) -> Result<String, OperatorTableError> {
        match self.entry(key) {
            Some(e) if !e.value.is_empty() => Ok(unquote(&e.value).to_string()),
            _ => Err(self.missing(key)),
        }
    }

    /// The boolean at `key`, or `None` when the key is absent.
    pub(super) fn flag(&self, key: &str) -> Result<Option<bool>, OperatorTableError> {
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        match unquote(&e.value) {
            "true" | "True" | "TRUE" => Ok(Some(true)),
            "false" | "False" | "FALSE" => Ok(Some(false)),
            other => Err(self.bad(e.line, key, format!("{other:?} is not true or false"))),
        }
    }

    /// The number at `key` and its line, or `None` when the key is absent.
    pub(super) fn optional_number(
        &self,
        key: &str,
    ) -> Result<Option<(f64, usize)>, OperatorTableError> {
        match self.entry(key) {
            None => Ok(None),
            Some(e) => self.number(key).map(|v| Some((v, e.line))),
        }
    }

    /// The number at `key`; missing is an error.
    pub(super) fn number(&self, key: &str) -> Result<f64, OperatorTableError> {
        let e = self.entry(key).ok_or_else(|| self.missing(key))?;
        unquote(&e.value)
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| self.bad(e.line, key, format!("{:?} is not a number", e.value)))
    }

    /// The list of whole numbers at `key`: a flow list `[1, 2]`, `- n` lines under it, or one
    /// number; missing or empty is an error.
    pub(super) fn whole_numbers(&self, key: &str) -> Result<Vec<u32>, OperatorTableError> {
        let e = self.entry(key).ok_or_else(|| self.missing(key))?;
        let items: Vec<(usize, &str)> = if e.value.is_empty() {
            e.items.iter().map(|(l, s)| (*l, s.as_str())).collect()
        } else {
            let inner = e.value.trim();
            let inner = inner
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .unwrap_or(inner);
            inner
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| (e.line, s))
                .collect()
        };
        if items.is_empty() {
            return Err(self.bad(e.line, key, "the list is empty; list at least one".into()));
        }
        items
            .into_iter()
            .map(|(line, s)| {
                unquote(s)
                    .parse::<u32>()
                    .map_err(|_| self.bad(line, key, format!("{s:?} is not a whole number")))
            })
            .collect()
    }
}

/// `line` without a trailing `# comment` (a `#` at the start or after a space, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && previous.is_whitespace() => return &line[..i],
            None => {}
        }
        previous = c;
    }
    line
}

/// Splits `key: value` or `key:` (value empty); `None` for a line of another shape.
fn split_key(content: &str) -> Option<(&str, &str)> {
    let content = content.trim_end();
    if let Some(key) = content.strip_suffix(':') {
        return (!key.contains(": ")).then_some((key.trim(), ""));
    }
    let (key, value) = content.split_once(": ")?;
    Some((key.trim(), value.trim()))
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = "\
gpu: NVIDIA RTX PRO 6000 Blackwell Server Edition
cuda_version: '13.0'   # quoted
tp_degrees: [1, 2]
skew_fit:
  enabled: true
  bucket_axes:
    n_labels: [n<=2, n<=4]
  per_tp:
    1:
      alpha_default: 0.057
    2:
      alpha_default: 0.0649
other:
- 4
- 8
";

    fn meta() -> Meta {
        Meta::parse(Path::new("meta.yaml"), META)
    }

    #[test]
    fn nested_keys_quoted_scalars_and_lists_read_by_dotted_path() {
        let m = meta();
        assert_eq!(
            m.string("gpu").unwrap(),
            "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        );
        assert_eq!(m.string("cuda_version").unwrap(), "13.0");
        assert_eq!(m.whole_numbers("tp_degrees").unwrap(), vec![1, 2]);
        assert_eq!(m.whole_numbers("other").unwrap(), vec![4, 8]);
        assert_eq!(m.flag("skew_fit.enabled").unwrap(), Some(true));
        assert_eq!(m.number("skew_fit.per_tp.1.alpha_default").unwrap(), 0.057);
        assert_eq!(m.number("skew_fit.per_tp.2.alpha_default").unwrap(), 0.0649);
        assert_eq!(m.flag("skew_profile.enabled").unwrap(), None);
    }

    #[test]
    fn a_missing_key_or_unreadable_value_is_an_error_naming_the_key_and_line() {
        let m = Meta::parse(
            Path::new("meta.yaml"),
            "tp_degrees: [1, two]\nskew_fit:\n  enabled: maybe\n",
        );
        let err = m.whole_numbers("tp_degrees").unwrap_err().to_string();
        assert!(err.contains("row 1") && err.contains("\"two\""), "{err}");
        let err = m.flag("skew_fit.enabled").unwrap_err().to_string();
        assert!(
            err.contains("row 3") && err.contains("skew_fit.enabled"),
            "{err}"
        );
        let err = m.string("model").unwrap_err().to_string();
        assert!(err.contains("no key model"), "{err}");
    }
}

//! The documents to parse: the real corpus from `--data DIR`, or generated
//! stand-ins of the same shapes.

use std::path::Path;

use crate::generate::{self, NAMES};

/// One document.
pub struct Doc {
    /// Corpus name without `.json`.
    pub name: &'static str,
    /// The JSON text.
    pub bytes: Vec<u8>,
}

/// The documents named in `only` (all seven if empty), read from
/// `data/NAME.json` if `data` is given, else generated at `scale`.
pub fn load(data: Option<&Path>, scale: f64, only: &[String]) -> Result<Vec<Doc>, String> {
    for o in only {
        if !NAMES.contains(&o.as_str()) {
            return Err(format!(
                "unknown document {o:?} (known: {})",
                NAMES.join(", ")
            ));
        }
    }
    let mut docs = Vec::new();
    for name in NAMES {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let bytes = match data {
            Some(dir) => {
                let path = dir.join(format!("{name}.json"));
                std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => generate::document(name, scale),
        };
        docs.push(Doc { name, bytes });
    }
    Ok(docs)
}

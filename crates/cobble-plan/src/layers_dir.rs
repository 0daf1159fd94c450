//! Reading `$PEBBLE/layers`: the only IO in this crate.
//!
//! The directory holds `NNN-label.yaml` files and `NNN-label.d/` directories of
//! `MMM-label2.yaml` files, one level deep. A file gets order `1000 * NNN` and label `label`;
//! a file in a directory gets `1000 * NNN + MMM` and `label/label2`. Entries that end in
//! neither `.yaml` nor `.d` are ignored so stray files cannot stop the daemon; badly named
//! `.yaml`/`.d` entries, and two entries of one level sharing an order or a label, are errors.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::error::PlanError;
use crate::{Layer, Plan};

struct Entry {
    name: String,
    order: u64,
    label: String,
    is_dir: bool,
}

impl Plan {
    /// Loads, combines and validates the layers in `layers_dir`. A missing directory is an
    /// empty plan.
    pub fn load_dir(layers_dir: &Path) -> Result<Plan, PlanError> {
        if !layers_dir.exists() {
            return Ok(Plan::default());
        }
        Plan::from_layers(read_layers(layers_dir)?)
    }
}

/// Reads every layer in `layers_dir`, in order, without combining them.
pub fn read_layers(layers_dir: &Path) -> Result<Vec<Layer>, PlanError> {
    let mut layers = Vec::new();
    for top in entries(layers_dir, true)? {
        let top_path = layers_dir.join(&top.name);
        if !top.is_dir {
            layers.push(load(&top_path, 1000 * top.order, top.label)?);
            continue;
        }
        for inner in entries(&top_path, false)? {
            let path = top_path.join(&inner.name);
            let label = format!("{}/{}", top.label, inner.label);
            layers.push(load(&path, 1000 * top.order + inner.order, label)?);
        }
    }
    Ok(layers)
}

fn load(path: &Path, order: u64, label: String) -> Result<Layer, PlanError> {
    let yaml = fs::read_to_string(path).map_err(|error| PlanError::Io {
        context: "cannot read layer file",
        message: format!("{}: {error}", path.display()),
    })?;
    Layer::parse(order, &label, &yaml)
}

/// The valid entries of one directory level, sorted by name (and therefore by order).
fn entries(dir: &Path, allow_dirs: bool) -> Result<Vec<Entry>, PlanError> {
    let io_error = |error: std::io::Error, path: &Path| PlanError::Io {
        context: "cannot read layers directory",
        message: format!("{}: {error}", path.display()),
    };
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_error(e, dir))? {
        let entry = entry.map_err(|e| io_error(e, dir))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();

    let mut result = Vec::new();
    let mut orders: BTreeMap<u64, String> = BTreeMap::new();
    let mut labels: BTreeMap<String, u64> = BTreeMap::new();
    for name in names {
        let stem = match name
            .strip_suffix(".yaml")
            .or_else(|| name.strip_suffix(".d"))
        {
            Some(stem) => stem,
            None => continue,
        };
        let path = dir.join(&name);
        // Follows symlinks, so a link to a directory counts as a directory.
        let is_dir = fs::metadata(&path)
            .map_err(|e| io_error(e, &path))?
            .is_dir();
        let Some((order, label)) = parse_entry_stem(stem) else {
            return Err(if is_dir {
                PlanError::InvalidLayerDirName { name }
            } else {
                PlanError::InvalidLayerFileName { name }
            });
        };
        if is_dir && !allow_dirs {
            return Err(PlanError::NestedLayerDir);
        }
        let previous = match (orders.get(&order), labels.get(label)) {
            (Some(old_label), _) => Some((order, old_label.clone())),
            (None, Some(&old_order)) => Some((old_order, label.to_owned())),
            (None, None) => None,
        };
        if let Some((order, label)) = previous {
            return Err(PlanError::DuplicateLayerFile { name, order, label });
        }
        orders.insert(order, label.to_owned());
        labels.insert(label.to_owned(), order);
        result.push(Entry {
            order,
            label: label.to_owned(),
            name,
            is_dir,
        });
    }
    Ok(result)
}

/// Splits `NNN-label` into its order and label: exactly three digits, a dash, then a label of
/// lowercase letters and digits that starts with a letter, is at least three characters long
/// (not counting dashes), and uses single dashes only between characters.
fn parse_entry_stem(stem: &str) -> Option<(u64, &str)> {
    let (digits, label) = stem.split_at_checked(3)?;
    let label = label.strip_prefix('-')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bytes = label.as_bytes();
    if !bytes.first()?.is_ascii_lowercase() {
        return None;
    }
    let mut alnum_after_first = 0;
    let mut previous_dash = false;
    for &b in &bytes[1..] {
        match b {
            b'-' if !previous_dash => previous_dash = true,
            b'a'..=b'z' | b'0'..=b'9' => {
                previous_dash = false;
                alnum_after_first += 1;
            }
            _ => return None,
        }
    }
    if previous_dash || alnum_after_first < 2 {
        return None;
    }
    Some((digits.parse().ok()?, label))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names() {
        let good = [
            ("001-foo", 1, "foo"),
            ("123-some-label", 123, "some-label"),
            ("900-a1b", 900, "a1b"),
            ("002-a-b-c", 2, "a-b-c"),
        ];
        for (stem, order, label) in good {
            assert_eq!(parse_entry_stem(stem), Some((order, label)), "{stem}");
        }
        let bad = [
            "001-l",
            "01-label",
            "0001-label",
            "001-label-",
            "001--label",
            "001-label--label",
            "001foo",
            "001-Foo",
            "001-1ab",
            "abc-foo",
            "001-ab",
            "001-a-b",
            "001-foo.bar",
        ];
        for stem in bad {
            assert_eq!(parse_entry_stem(stem), None, "{stem}");
        }
    }
}

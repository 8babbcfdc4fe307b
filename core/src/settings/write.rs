//! Changing one setting in `settings.json`: `cairn config set` / `unset` and the viewer's
//! context page both come here, so a value is parsed, checked and written one way.
//!
//! A value is parsed for its key's type as an environment variable's is (`true`/`false`,
//! a number, a string, a comma-separated or JSON list), then the whole file as it would
//! be is loaded exactly as [`Settings::load_from`] loads it (types and
//! [`Settings::validate`]): an unknown key, a bad value or any error in the result writes
//! nothing. Every other key of the file, unknown ones too, is kept as it was, in its
//! order. The file is replaced atomically (a private temp file beside it, fsynced, renamed
//! over it, the directory fsynced), mode 0600. Two changes at once take turns on a lock
//! file beside it (`.settings.json.lock`), so neither is lost. Only `settings.json` is
//! written: sync's url and key live in files of their own, never touched here.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{Settings, defaults, lookup, parse_file, parse_override, read_file};
use crate::error::{Error, Result};

/// One change to the file: a key set to a value (as typed), or removed (its default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set { key: String, value: String },
    Unset { key: String },
}

impl Change {
    pub fn key(&self) -> &str {
        match self {
            Change::Set { key, .. } | Change::Unset { key } => key,
        }
    }
}

/// What a change did to the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The file written (a symlinked `settings.json` is written through its link).
    pub file: PathBuf,
    pub key: String,
    /// The key's value in the file before, `None` when the file did not set it.
    pub before: Option<Value>,
    /// Its value in the file now, `None` when unset.
    pub after: Option<Value>,
    /// Its effective value from the file and defaults (environment variables aside).
    pub effective: Value,
}

impl Written {
    /// True when the file's value did not change (and the file was not rewritten).
    pub fn unchanged(&self) -> bool {
        self.before == self.after
    }
}

/// Applies `change` to the settings file `file` (missing: an empty one, created), after
/// checking the result as loading would. On any error nothing is written.
pub fn apply(file: &Path, change: &Change) -> Result<Written> {
    let key = change.key();
    let refused = |why: String| Error::Settings(format!("cannot change {key}: {why}"));
    let default = known(key).map_err(refused)?;
    let target = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let _turn = take_turn(&target)?;
    let text = read_file(&target)?;
    let mut map = match &text {
        Some(t) => parse_file(file, t)?,
        None => Map::new(),
    };
    let (section, leaf) = key.split_once('.').unwrap_or((key, ""));
    let before = map.get(section).and_then(|s| s.get(leaf)).cloned();
    match change {
        Change::Set { value, .. } => {
            let parsed = parse_override(&default, value)
                .map_err(|why| refused(format!("{value:?}: {why}")))?;
            let entry = map
                .entry(section.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(keys) = entry else {
                return Err(refused(format!(
                    "the file's {section} is not a section; fix {} first",
                    file.display()
                )));
            };
            keys.insert(leaf.to_string(), parsed);
        }
        Change::Unset { .. } => {
            if let Some(Value::Object(keys)) = map.get_mut(section) {
                keys.shift_remove(leaf);
                if keys.is_empty() {
                    map.shift_remove(section);
                }
            }
        }
    }
    let after = map.get(section).and_then(|s| s.get(leaf)).cloned();
    let mut new_text = serde_json::to_string_pretty(&Value::Object(map))
        .map_err(|e| Error::Settings(e.to_string()))?;
    new_text.push('\n');
    // Checked as the next load will read it: the file alone, no environment.
    let loaded = Settings::load_text(file, Some(&new_text), std::iter::empty(), &[])
        .map_err(|e| refused(e.to_string()))?;
    let effective = serde_json::to_value(&loaded.settings)
        .ok()
        .and_then(|v| lookup(&v, key).cloned())
        .unwrap_or(Value::Null);
    if before != after {
        replace(&target, new_text.as_bytes())?;
    }
    Ok(Written {
        file: target,
        key: key.to_string(),
        before,
        after,
        effective,
    })
}

/// The default of a known key, or what the known keys are.
fn known(key: &str) -> std::result::Result<Value, String> {
    let defaults = defaults();
    let Value::Object(sections) = &defaults else {
        return Err("no settings".into());
    };
    let (section, leaf) = key.split_once('.').unwrap_or((key, ""));
    let Some(Value::Object(keys)) = sections.get(section) else {
        let names: Vec<&str> = sections.keys().map(String::as_str).collect();
        return Err(format!(
            "no such setting; a setting is SECTION.KEY, the sections being {}",
            names.join(", ")
        ));
    };
    match keys.get(leaf) {
        Some(v) if !leaf.contains('.') => Ok(v.clone()),
        _ => {
            let names: Vec<String> = keys.keys().map(|k| format!("{section}.{k}")).collect();
            Err(format!(
                "no such setting; the settings of {section} are {}",
                names.join(", ")
            ))
        }
    }
}

/// Waits for and holds the lock beside `file` that every change takes, so that a read,
/// change and write of the file is never interleaved with another's. Released on drop.
fn take_turn(file: &Path) -> Result<std::fs::File> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "settings.json".into());
    let path = file.with_file_name(format!(".{name}.lock"));
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("cannot open settings lock", &path, e))?;
    lock.lock()
        .map_err(|e| Error::io("cannot lock settings", &path, e))?;
    Ok(lock)
}

/// Replaces `file` with `bytes` ([`crate::store::paths::replace_file`], owner-only).
fn replace(file: &Path, bytes: &[u8]) -> Result<()> {
    crate::store::paths::replace_file(file, bytes, 0o600)
        .map_err(|e| Error::io("cannot write settings file", file, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn set(key: &str, value: &str) -> Change {
        Change::Set {
            key: key.into(),
            value: value.into(),
        }
    }

    fn unset(key: &str) -> Change {
        Change::Unset { key: key.into() }
    }

    fn file_with(text: Option<&str>) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("settings.json");
        if let Some(t) = text {
            std::fs::write(&file, t).expect("write");
        }
        (tmp, file)
    }

    fn read(file: &Path) -> Value {
        serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("json")
    }

    #[test]
    fn a_set_keeps_every_other_key_in_its_order() {
        let (_tmp, file) = file_with(Some(
            r#"{"embed": {"model_dir": "/m", "provider": "local"}, "mine": {"x": 1}, "context": {"max_sessions": 4}}"#,
        ));
        let w = apply(&file, &set("context.budget_tokens", "900")).expect("set");
        assert_eq!(w.before, None);
        assert_eq!(w.after, Some(Value::from(900)));
        assert_eq!(w.effective, Value::from(900));
        let text = std::fs::read_to_string(&file).expect("read");
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["embed"]["model_dir"], "/m");
        assert_eq!(v["mine"]["x"], 1);
        assert_eq!(v["context"]["max_sessions"], 4);
        assert_eq!(v["context"]["budget_tokens"], 900);
        let order: Vec<&str> = v
            .as_object()
            .expect("map")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(order, ["embed", "mine", "context"]);
        let loaded = Settings::load_from(&file, std::iter::empty(), &[]).expect("load");
        assert_eq!(loaded.settings.context.budget_tokens, 900);
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn changes_made_at_once_are_all_kept() {
        let (_tmp, file) = file_with(Some("{}"));
        let keys = [
            ("context.budget_tokens", "700"),
            ("context.max_sessions", "5"),
            ("recall.max_memories", "2"),
            ("recall.budget_tokens", "120"),
            ("recall.min_relevance", "0.6"),
            ("recall.at_prompt", "false"),
        ];
        std::thread::scope(|s| {
            for (key, value) in keys {
                let file = &file;
                s.spawn(move || {
                    for _ in 0..20 {
                        apply(file, &set(key, value)).expect("set");
                        apply(file, &unset(key)).expect("unset");
                    }
                    apply(file, &set(key, value)).expect("set");
                });
            }
        });
        let v = read(&file);
        for (key, value) in keys {
            let (section, leaf) = key.split_once('.').expect("dotted");
            assert_eq!(v[section][leaf].to_string(), value, "{key} lost");
        }
    }

    #[test]
    fn values_are_parsed_for_the_keys_type() {
        let (_tmp, file) = file_with(None);
        apply(&file, &set("recall.at_prompt", "off")).expect("bool");
        apply(&file, &set("recall.min_relevance", "0.25")).expect("float");
        apply(&file, &set("log.level", "debug")).expect("string");
        apply(&file, &set("capture.skip_tools", "A, B")).expect("list");
        let v = read(&file);
        assert_eq!(v["recall"]["at_prompt"], false);
        assert_eq!(v["recall"]["min_relevance"], 0.25);
        assert_eq!(v["log"]["level"], "debug");
        assert_eq!(v["capture"]["skip_tools"], serde_json::json!(["A", "B"]));
    }

    #[test]
    fn a_refused_change_names_the_key_and_writes_nothing() {
        let original = "{\"context\": {\"max_sessions\": 4}}";
        let (_tmp, file) = file_with(Some(original));
        let check = |change: Change, wanted: &[&str]| {
            let msg = apply(&file, &change).expect_err("refused").to_string();
            for w in wanted {
                assert!(msg.contains(w), "{msg} lacks {w}");
            }
            assert_eq!(std::fs::read_to_string(&file).expect("read"), original);
        };
        check(
            set("context.budget", "9"),
            &["context.budget", "context.budget_tokens"],
        );
        check(set("nope.x", "1"), &["nope.x", "context, recall"]);
        check(set("context", "1"), &["context"]);
        check(
            set("context.budget_tokens", "many"),
            &["context.budget_tokens", "non-negative integer"],
        );
        check(
            set("recall.min_relevance", "2"),
            &["recall.min_relevance", "between 0 and 1"],
        );
        check(
            set("batch.max_size", "0"),
            &["batch.max_size", "at least 1"],
        );
        check(set("log.level", "loud"), &["log.level", "debug"]);
        check(
            set("recall.at_prompt", "maybe"),
            &["recall.at_prompt", "true or false"],
        );
        check(
            set("worker.concurrency", "99999999999"),
            &["worker.concurrency"],
        );
        let left: Vec<_> = std::fs::read_dir(file.parent().expect("dir"))
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "temp files left behind: {left:?}");
    }

    #[test]
    fn a_file_broken_elsewhere_is_not_made_worse() {
        let (_tmp, file) = file_with(Some("{\"queue\": {\"lease_secs\": 0}}"));
        let msg = apply(&file, &set("context.budget_tokens", "900"))
            .expect_err("still broken")
            .to_string();
        assert!(msg.contains("queue.lease_secs"), "{msg}");
        // Setting the broken key right is how it is fixed.
        apply(&file, &set("queue.lease_secs", "60")).expect("fixed");
        let (_tmp, file) = file_with(Some("{\"context\": 3}"));
        let msg = apply(&file, &set("context.budget_tokens", "900"))
            .expect_err("not a section")
            .to_string();
        assert!(msg.contains("not a section"), "{msg}");
    }

    #[test]
    fn unset_goes_back_to_the_default() {
        let (_tmp, file) = file_with(Some(
            "{\"context\": {\"budget_tokens\": 900}, \"log\": {\"level\": \"debug\"}}",
        ));
        let w = apply(&file, &unset("context.budget_tokens")).expect("unset");
        assert_eq!(w.before, Some(Value::from(900)));
        assert_eq!(w.after, None);
        assert_eq!(
            w.effective,
            Value::from(Settings::default().context.budget_tokens)
        );
        let v = read(&file);
        assert!(v.get("context").is_none(), "{v}");
        assert_eq!(v["log"]["level"], "debug");
        let again = apply(&file, &unset("context.budget_tokens")).expect("unset again");
        assert!(again.unchanged());
    }

    #[test]
    fn a_symlinked_file_is_written_through_its_link() {
        let (tmp, real) = file_with(Some("{}"));
        let link = tmp.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        apply(&link, &set("context.max_sessions", "3")).expect("set");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("meta")
                .file_type()
                .is_symlink()
        );
        assert_eq!(read(&real)["context"]["max_sessions"], 3);
    }
}

//! Finding the plugins in the plugin directories, at start-up.
//!
//! Each directory given with `--plugin-dir` holds one directory per plugin, with its
//! `plugin.json`. The server runs what a plugin's descriptor names, with its own rights, so a
//! plugin is loaded only from files no other user may change (as sshd's StrictModes): the
//! directories and files must belong to the server's user (or root) and be writable by no
//! group or other user, and so must every directory above them up to `/` (one others may
//! write unless its sticky bit keeps them to their own entries, as `/tmp`'s), or whoever may
//! rename an entry there swaps the plugin. A plugin's directory is a real directory, not a
//! link. The same is checked again before each of its processes starts ([`Guard`]), so what
//! changed since start-up is refused then. A plugin that cannot be loaded (a bad descriptor,
//! an unsafe file, a name already taken) is reported with its file and reason and the others
//! load.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ebb_plugin::{Descriptor, Guard, Kind, PluginAutomator, PluginProvisioner};

use crate::model::view::PluginFault;

/// The most plugin directories one `--plugin-dir` may hold, and the most files of one plugin
/// checked for their owner and mode.
const MAX_PLUGINS: usize = 200;
const MAX_FILES: usize = 2000;

/// What the plugin directories hold.
#[derive(Debug, Default)]
pub struct Found {
    pub provisioners: Vec<Arc<PluginProvisioner>>,
    pub automators: Vec<Arc<PluginAutomator>>,
    pub broken: Vec<PluginFault>,
}

/// Loads every plugin under `dirs`; `taken` says whether a name is a built-in's (a
/// provisioner's or an automator's: `shell`).
pub fn load(dirs: &[PathBuf], taken: impl Fn(&str) -> bool) -> Found {
    let mut found = Found::default();
    let mut names: Vec<&'static str> = Vec::new();
    for dir in dirs {
        let fault = |error: String| PluginFault {
            dir: dir.display().to_string(),
            error,
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                found.broken.push(fault(format!("cannot be read: {e}")));
                continue;
            }
        };
        if let Err(e) = safe(dir).and_then(|()| safe_above(dir)) {
            found.broken.push(fault(e));
            continue;
        }
        let mut plugin_dirs: Vec<PathBuf> = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => plugin_dirs.push(path),
                Ok(t) if t.is_symlink() && path.is_dir() => found.broken.push(PluginFault {
                    dir: path.display().to_string(),
                    error: format!(
                        "{} is a symbolic link: a plugin is loaded from a real directory, so what it runs cannot be pointed elsewhere",
                        path.display()
                    ),
                }),
                Ok(_) | Err(_) => {}
            }
        }
        plugin_dirs.sort();
        if plugin_dirs.len() > MAX_PLUGINS {
            found.broken.push(fault(format!(
                "holds {} directories; the most read is {MAX_PLUGINS}",
                plugin_dirs.len()
            )));
            plugin_dirs.truncate(MAX_PLUGINS);
        }
        for plugin_dir in plugin_dirs {
            match one(&plugin_dir, &taken, &names) {
                Ok(descriptor) => {
                    names.push(descriptor.name);
                    match descriptor.kind {
                        Kind::Provisioner => found
                            .provisioners
                            .push(Arc::new(PluginProvisioner::new(descriptor))),
                        Kind::Automator => found
                            .automators
                            .push(Arc::new(PluginAutomator::new(descriptor))),
                    }
                }
                Err(error) => found.broken.push(PluginFault {
                    dir: plugin_dir.display().to_string(),
                    error,
                }),
            }
        }
    }
    found
}

fn one(dir: &Path, taken: &impl Fn(&str) -> bool, loaded: &[&str]) -> Result<Descriptor, String> {
    safe_plugin(dir)?;
    let mut descriptor = ebb_plugin::descriptor::load(dir).map_err(|e| e.to_string())?;
    descriptor.guard = Some(Guard(Arc::new(safe_plugin)));
    let file = dir.join(ebb_plugin::descriptor::FILE);
    if taken(descriptor.name) {
        return Err(format!(
            "{}: field 'name': '{}' is a built-in's name",
            file.display(),
            descriptor.name
        ));
    }
    if loaded.contains(&descriptor.name) {
        return Err(format!(
            "{}: field 'name': a plugin named '{}' is already loaded",
            file.display(),
            descriptor.name
        ));
    }
    Ok(descriptor)
}

/// Refuses a directory or file that another user could change.
fn safe(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "{} belongs to user {}, not to the server's user ({me}) or root",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} may be changed by other users (mode {:o}); make it writable by its owner only",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Whether plugin directory `dir` is safe to load and run from: itself, everything in it and
/// every directory above it.
fn safe_plugin(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symbolic link", dir.display()));
    }
    safe_tree(dir)?;
    safe_above(dir)
}

/// Refuses a directory above `path` (its real path, up to `/`) that belongs to another user
/// than the server's or root, or that others may write without a sticky bit.
fn safe_above(path: &Path) -> Result<(), String> {
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let me = rustix::process::geteuid().as_raw();
    for dir in real.ancestors().skip(1) {
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if meta.uid() != me && meta.uid() != 0 {
            return Err(format!(
                "{} (above {}) belongs to user {}, not to the server's user ({me}) or root: its owner could swap the plugins",
                dir.display(),
                path.display(),
                meta.uid()
            ));
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && !sticky {
            return Err(format!(
                "{} (above {}) may be changed by other users (mode {:o}): they could rename the plugins away and put others there; make it writable by its owner only",
                dir.display(),
                path.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// [`safe`] for a plugin's directory and everything in it.
fn safe_tree(dir: &Path) -> Result<(), String> {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(path) = stack.pop() {
        seen += 1;
        if seen > MAX_FILES {
            return Err(format!(
                "{} holds more than {MAX_FILES} files",
                dir.display()
            ));
        }
        safe(&path)?;
        let meta =
            std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.is_dir() {
            let entries =
                std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            stack.extend(entries.filter_map(Result::ok).map(|e| e.path()));
        }
    }
    Ok(())
}

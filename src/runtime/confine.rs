//! What keeps the server's secrets from the programs it starts and from other local users.
//!
//! Programs on `native`, `local` and `sim` clusters run on this host as the server's user. The
//! server cannot hide its files from that user; what it does is:
//! - a umask of 077, so the store, the key file, run directories and sandboxes it creates are
//!   owner-only (other local users read none of them), and the data and work directories are
//!   made owner-only at every start;
//! - the process is not dumpable, so a program running as the same (non-root) user cannot read
//!   the server's memory or environment through `/proc`;
//! - programs, service scripts and the launcher get a clean environment (`program::passed_env`
//!   plus ebb's documented variables), never the server's;
//! - programs work under the work directory, apart from the data directory that holds the
//!   store and the secure key.
//!
//! It must never weaken what it finds: a data dir others can read is narrowed, not trusted.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt};
use std::path::{Path, PathBuf};

/// Makes every file and directory this process creates from now on owner-only.
pub fn owner_only() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

/// Forbids other processes of the same user to read this one's memory and environment
/// (`/proc/<pid>/environ`, `/proc/<pid>/mem`), and turns off its core dumps.
pub fn not_dumpable() {
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(error = %e, "cannot make the server non-dumpable: programs of the same user could read its memory");
    }
}

/// The work directory when none is given: `<data-dir>-work`, next to the data directory.
pub fn default_work_dir(data_dir: &Path) -> PathBuf {
    let mut name = data_dir
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "ebb-data".into());
    name.push("-work");
    data_dir.with_file_name(name)
}

/// Creates `dir` if needed and makes it owner-only (0700). Refuses a symlink.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(std::io::Error::other(
            "is a symbolic link; give the real directory",
        ));
    }
    // Another user's directory (one root would otherwise take over) is refused: its owner
    // could plant links and files where the server writes and deletes.
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(std::io::Error::other(format!(
            "is owned by another user (uid {}), not the server's (uid {me}); give a directory of the server's user",
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Makes the existing file `path` owner-only (0600).
pub fn private_file(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_dir_sits_next_to_the_data_dir() {
        assert_eq!(
            default_work_dir(Path::new("/var/lib/ebb")),
            Path::new("/var/lib/ebb-work")
        );
        assert_eq!(
            default_work_dir(Path::new("/srv/x/ebb-data")),
            Path::new("/srv/x/ebb-data-work")
        );
    }

    #[test]
    fn directories_and_files_are_narrowed_to_their_owner() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).expect("dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        private_dir(&dir).expect("private");
        let mode = std::fs::metadata(&dir).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = dir.join("f");
        std::fs::write(&file, "x").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        private_file(&file).expect("private");
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let link = tmp.path().join("l");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        assert!(private_dir(&link).is_err());
    }
}

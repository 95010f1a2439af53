//! Gives the crate `EBB_BUILD_ID`: a hash of its sources and its lock file, the same for
//! `ebb` and `ebb-shim` built from one tree. A server launches programs with the `ebb-shim`
//! beside it only if that says the same id: one left there by an earlier build (`cargo run`
//! builds `ebb` alone) may launch them as that build did.

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=Cargo.lock");
    let mut files = Vec::new();
    collect(Path::new("src"), &mut files);
    files.sort();
    let mut hasher = DefaultHasher::new();
    for file in &files {
        file.hash(&mut hasher);
        fs::read(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()))
            .hash(&mut hasher);
    }
    // A workspace member's build has no lock file of its own: none is hashed.
    if let Ok(lock) = fs::read("Cargo.lock") {
        lock.hash(&mut hasher);
    }
    println!("cargo::rustc-env=EBB_BUILD_ID={:016x}", hasher.finish());
}

/// Every file under `dir`, at any depth.
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

//! A service's daemon logs on its node: the last bytes of each file its template names
//! (`logs`), read from a local node's directory, opened beneath it (a link planted there
//! cannot make the server read anything outside it), or over SSH from a remote node's.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use super::deps::Deps;
use crate::model::plan::NodeRecord;
use crate::model::run::RunRecord;
use crate::model::view::ServiceLog;
use crate::store::StoreError;

/// The most bytes of each log file returned: its end.
pub const MAX_BYTES: u64 = 64 * 1024;
/// The longest a read over SSH takes, logging in included.
const SSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The logs `files` (paths under the node's directory, checked by the template's
/// validation) of the service on `record`, a node of `run`'s cluster.
pub async fn read(
    deps: &Deps,
    run: &RunRecord,
    record: &NodeRecord,
    files: &[String],
) -> Result<Vec<ServiceLog>, StoreError> {
    if record.properties.contains_key(ebb_spi::FACT_SSH) {
        // A node that does not answer holds the request no longer than this.
        let read = tokio::time::timeout(SSH_LIMIT, over_ssh(deps, run, record, files)).await;
        return Ok(read.unwrap_or_else(|_| {
            files
                .iter()
                .map(|f| {
                    ServiceLog::unread(
                        f,
                        format!("node {} did not answer in {SSH_LIMIT:?}", record.node),
                    )
                })
                .collect()
        }));
    }
    let dir = record
        .properties
        .get(ebb_spi::FACT_WORK_DIR)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| deps.node_work_dir(run.cluster_id(), &record.node));
    let files = files.to_vec();
    let read = tokio::task::spawn_blocking(move || {
        files
            .iter()
            .map(|file| match tail_beneath(&dir, file, MAX_BYTES) {
                Ok((text, size)) => ServiceLog::found(file, text, size),
                Err(e) => ServiceLog::unread(file, e.to_string()),
            })
            .collect()
    })
    .await
    .map_err(|e| StoreError::Storage(format!("reading the logs stopped: {e}")))?;
    Ok(read)
}

/// The last `max` bytes of `file` under `dir` (and the file's size), opened with every part
/// of its path resolved beneath `dir`; only a regular file is read.
fn tail_beneath(dir: &Path, file: &str, max: u64) -> std::io::Result<(String, u64)> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let base = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fd = rustix::fs::openat2(
        &base,
        file,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )?;
    let mut f = std::fs::File::from(fd);
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let size = meta.len();
    f.seek(SeekFrom::Start(size.saturating_sub(max)))?;
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes)?;
    Ok((String::from_utf8_lossy(&bytes).into_owned(), size))
}

/// [`read`] on a node reached over SSH: one command per file, in one session.
async fn over_ssh(
    deps: &Deps,
    run: &RunRecord,
    record: &NodeRecord,
    files: &[String],
) -> Vec<ServiceLog> {
    let all_failed = |why: String| {
        files
            .iter()
            .map(|f| ServiceLog::unread(f, why.clone()))
            .collect::<Vec<_>>()
    };
    let context = ebb_spi::Context::new(run.properties(), deps.work_dir.clone());
    let (cipher, namespace) = (
        std::sync::Arc::clone(&deps.cipher),
        run.key.namespace.clone(),
    );
    let resolved = deps
        .store
        .read(move |r| {
            Ok::<_, StoreError>(
                crate::store::secure::resolve(r, &cipher, &namespace, &context.properties)
                    .map(|res| res.into_context(context.clone())),
            )
        })
        .await;
    let context = match resolved {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return all_failed(e),
        Err(e) => return all_failed(e.to_string()),
    };
    let node = match super::remote::Node::of(&context, run.cluster_id(), record) {
        Some(Ok(node)) => node,
        Some(Err(e)) => return all_failed(e),
        None => return all_failed("the node is not reached over SSH".into()),
    };
    let session = match node.connect(deps).await {
        Ok(s) => s,
        Err(e) => return all_failed(format!("cannot log in to {}: {e}", record.node)),
    };
    let mut out = Vec::new();
    for file in files {
        let path = ebb_ssh::quote(&format!("{}/{file}", node.dir));
        // The size on the first line, then the end of the file; only a regular file that is
        // no link is read.
        let command = format!(
            "f={path}; if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then wc -c < \"$f\"; tail -c {MAX_BYTES} \"$f\"; else echo missing >&2; exit 3; fi"
        );
        match session.exec(&command, b"").await {
            Ok(o) if o.success() => {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                let (size, rest) = text.split_once('\n').unwrap_or((text.as_str(), ""));
                let size = size.trim().parse().unwrap_or(0);
                out.push(ServiceLog::found(file, rest.to_string(), size));
            }
            Ok(o) if o.status == Some(3) => {
                out.push(ServiceLog::unread(file, "No such file or directory".into()))
            }
            Ok(o) => out.push(ServiceLog::unread(file, o.failure())),
            Err(e) => out.push(ServiceLog::unread(file, e.to_string())),
        }
    }
    session.close().await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_end_of_a_file_beneath_its_directory_and_nothing_outside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("spark")).expect("mkdir");
        std::fs::write(dir.path().join("spark/worker.log"), "a".repeat(10) + "end").expect("write");
        let (text, size) = tail_beneath(dir.path(), "spark/worker.log", 5).expect("read");
        assert_eq!((text.as_str(), size), ("aaend", 13));
        std::fs::write(outside.path().join("secret"), "secret").expect("write");
        std::os::unix::fs::symlink(
            outside.path().join("secret"),
            dir.path().join("spark/link.log"),
        )
        .expect("link");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).expect("link");
        assert!(tail_beneath(dir.path(), "spark/link.log", 100).is_err());
        assert!(tail_beneath(dir.path(), "out/secret", 100).is_err());
        std::fs::create_dir(dir.path().join("spark/dir.log")).expect("mkdir");
        assert!(tail_beneath(dir.path(), "spark/dir.log", 100).is_err());
    }
}

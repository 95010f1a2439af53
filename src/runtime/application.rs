//! The engine application a run's program submitted (a Spark application), found in the
//! program's output on this host as it is written, so the run names it while it runs.

use std::future::Future;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use super::program::{STDERR, STDOUT};
use crate::model::run::Application;
use crate::rules::lifecycle::Event;

/// How often the output is looked at.
const LOOK: Duration = Duration::from_secs(1);
/// Most bytes read of each file in one look.
const CHUNK: u64 = 1 << 20;
/// Most bytes of each file looked through: a driver names its application as it starts.
const MAX_SCANNED: u64 = 16 << 20;
/// Bytes kept from the end of one look for the next, so a line cut between two is found.
const OVERLAP: usize = 256;

/// Where one output file was read to.
#[derive(Debug, Default)]
struct Cursor {
    offset: u64,
    tail: Vec<u8>,
}

/// The program's output files in an attempt's directory, and how far each was looked
/// through.
#[derive(Debug)]
pub struct Watch {
    dir: PathBuf,
    files: [Cursor; 2],
}

impl Watch {
    pub fn new(dir: PathBuf) -> Watch {
        Watch {
            dir,
            files: Default::default(),
        }
    }

    /// Reads what the program wrote since the last look: the application, once named.
    pub fn look(&mut self) -> Option<Application> {
        for (name, cursor) in [STDERR, STDOUT].into_iter().zip(self.files.iter_mut()) {
            if cursor.offset >= MAX_SCANNED {
                continue;
            }
            let Ok(mut file) = std::fs::File::open(self.dir.join(name)) else {
                continue;
            };
            if file.seek(SeekFrom::Start(cursor.offset)).is_err() {
                continue;
            }
            let mut bytes = std::mem::take(&mut cursor.tail);
            let kept = bytes.len();
            if file.take(CHUNK).read_to_end(&mut bytes).is_err() {
                bytes.truncate(kept);
            }
            cursor.offset += (bytes.len() - kept) as u64;
            if let Some(app) = Application::spark_in(&String::from_utf8_lossy(&bytes)) {
                return Some(app);
            }
            cursor.tail = bytes.split_off(bytes.len().saturating_sub(OVERLAP));
        }
        None
    }
}

/// Waits for `wait` (the program's end); meanwhile, for a program that submits to `engine`,
/// tells `news` of the application its output in `dir` names.
pub async fn watched<T>(
    engine: Option<&str>,
    dir: PathBuf,
    news: &impl Fn(Event),
    wait: impl Future<Output = T>,
) -> T {
    if engine != Some(crate::model::app::SPARK) {
        return wait.await;
    }
    tokio::pin!(wait);
    let mut watch = Some(Watch::new(dir));
    let mut tick = tokio::time::interval(LOOK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            exit = &mut wait => {
                // What it wrote last may name it.
                if let Some(w) = watch.take()
                    && let (_, Some(app)) = look(w).await
                {
                    news(Event::Application(app));
                }
                return exit;
            }
            _ = tick.tick(), if watch.is_some() => {
                if let Some(w) = watch.take() {
                    match look(w).await {
                        (_, Some(app)) => news(Event::Application(app)),
                        (w, None) => watch = w,
                    }
                }
            }
        }
    }
}

/// One look, off the async threads: the watch to look with next (none if the look failed),
/// and what it found.
async fn look(mut watch: Watch) -> (Option<Watch>, Option<Application>) {
    tokio::task::spawn_blocking(move || {
        let found = watch.look();
        (Some(watch), found)
    })
    .await
    .unwrap_or((None, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_found_across_looks_and_a_line_cut_between_two() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = dir.path().join(STDERR);
        let mut w = Watch::new(dir.path().to_path_buf());
        assert_eq!(w.look(), None, "no file yet");
        std::fs::write(&err, "26/11/29 08:30:12 INFO SparkContext: Running Spark\n")
            .expect("write");
        assert_eq!(w.look(), None);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&err)
            .expect("open");
        std::io::Write::write_all(
            &mut f,
            b"INFO StandaloneSchedulerBackend: Connected to Spark cl",
        )
        .expect("write");
        assert_eq!(w.look(), None, "half a line");
        std::io::Write::write_all(&mut f, b"uster with app ID app-20261129083012-0007\n")
            .expect("write");
        assert_eq!(
            w.look().map(|a| a.id),
            Some("app-20261129083012-0007".to_string())
        );
    }

    #[test]
    fn what_is_not_a_spark_id_is_none() {
        assert_eq!(
            Application::spark_in("Connected to Spark cluster with app ID $(reboot)"),
            None
        );
        assert_eq!(Application::spark_in("app ID app-1"), None);
    }
}

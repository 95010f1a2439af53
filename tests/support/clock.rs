//! A wall clock a test can step under one server: Debian's libfaketime preloaded into it,
//! reading the offset from a file the test rewrites. Only the wall clock moves: the monotonic
//! clock, which leases, fences and timers run on, is left alone, as a real step leaves it.

use std::path::{Path, PathBuf};

/// Where Debian puts libfaketime.
const LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// One server's wall clock, at an offset the test sets.
pub struct SteppedClock {
    file: PathBuf,
}

impl SteppedClock {
    /// A clock at no offset, its file `name` in `dir`; installs libfaketime when missing.
    pub fn new(dir: &Path, name: &str) -> SteppedClock {
        super::process::ensure_installed(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            "tests/support/faketime/setup.sh",
            "libfaketime (to step a server's wall clock)",
        );
        assert!(
            Path::new(LIBRARY).exists(),
            "libfaketime is installed but {LIBRARY} is missing"
        );
        let clock = SteppedClock {
            file: dir.join(format!("{name}.faketime")),
        };
        clock.step("+0");
        clock
    }

    /// The environment that puts a server on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), LIBRARY.into()),
            (
                "FAKETIME_TIMESTAMP_FILE".into(),
                self.file.to_string_lossy().into_owned(),
            ),
            // The file is read again at most every second, not at every look at the clock.
            ("FAKETIME_CACHE_DURATION".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }

    /// Steps the clock to `offset` from the real time (libfaketime's form: `+10m`, `-10m`,
    /// `+0`), written aside and renamed in so the server never reads half of it.
    pub fn step(&self, offset: &str) {
        let aside = self.file.with_extension("new");
        std::fs::write(&aside, format!("{offset}\n")).expect("write the offset");
        std::fs::rename(&aside, &self.file).expect("rename the offset in");
    }
}

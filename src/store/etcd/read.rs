//! Reads: from the copy in memory once it has caught up with what the read must see, else
//! from etcd at that revision.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::backend::ReadAs;
use super::super::job::ReadJob;
use super::super::table::StoreError;
use super::probe;
use super::shared::{Shared, Trip};
use super::view::View;

impl Shared {
    pub(super) fn exists(&self, key: &[u8]) -> Result<bool, StoreError> {
        let options = etcd_client::GetOptions::new().with_count_only();
        self.get_now(key.to_vec(), Some(options), Trip::Read)
            .map(|r| r.count() > 0)
    }

    pub(super) fn read(&self, mut job: Box<dyn ReadJob>, how: ReadAs) {
        let started = Instant::now();
        let mut waits = 0u32;
        let patient = how.patient;
        loop {
            let view = match self.read_view(how.seen, how.since) {
                Ok(view) => view,
                Err(e) => {
                    if self.wait(&e, patient, started, &mut waits) {
                        continue;
                    }
                    return job.finish(Some(e));
                }
            };
            job.run(&view);
            match view.failure() {
                None => return job.finish(None),
                Some(e) => {
                    if self.wait(&e, patient, started, &mut waits) {
                        continue;
                    }
                    return job.finish(Some(e));
                }
            }
        }
    }

    /// The view a read runs over. A read of what this server has seen (a run's owner, a long
    /// poll's look for news) reads the copy in memory as it is: it holds every write this
    /// server made (a write is answered once the copy has it), and the owner is the only
    /// writer of its run's records. Anyone else first needs etcd's
    /// revision from an answer given after it (or its request, `since`) began: the answer to
    /// one of this server's commits, or a revision request shared with the reads waiting at
    /// the time (see [`probe`]); then it reads the copy once it has
    /// caught up with it, so the read sees every write acknowledged before it (or its request)
    /// began, by any server; if the copy lags (etcd also serves others, whose writes it does
    /// not follow), the read goes to etcd at that revision.
    pub(super) fn read_view(
        &self,
        seen: bool,
        since: Option<Instant>,
    ) -> Result<View<'_>, StoreError> {
        let Some(copy) = self.cache.snapshot() else {
            return Ok(View::new(self));
        };
        let pending = self.keys.pending();
        let written = self.written.load(Ordering::SeqCst);
        if seen && copy.get(&pending).is_none() {
            if copy.revision >= written {
                return Ok(View::cached(self, copy, Trip::Read));
            }
            if self
                .handle
                .block_on(self.cache.caught_up(written, COPY_LAG))
                && let Some(copy) = self.cache.snapshot()
                && copy.get(&pending).is_none()
            {
                return Ok(View::cached(self, copy, Trip::Read));
            }
        }
        let (revision, pending_now) = self.handle.block_on(self.revision_since(since))?;
        if pending_now {
            let finished = self.finish_pending()?;
            self.catch_up(finished);
            return self.read_view(false, None);
        }
        if copy.revision >= revision {
            return Ok(View::cached(self, copy, Trip::Read));
        }
        if self
            .handle
            .block_on(self.cache.caught_up(revision, COPY_LAG))
            && let Some(copy) = self.cache.snapshot()
            && copy.revision >= revision
            && copy.get(&self.keys.pending()).is_none()
        {
            return Ok(View::cached(self, copy, Trip::Read));
        }
        Ok(View::at(self, revision))
    }
}
/// How long a read waits for the copy in memory to catch up before it reads etcd itself.
const COPY_LAG: Duration = Duration::from_millis(20);

impl Shared {
    /// etcd's revision after `since` (or now), and whether a write larger than a transaction
    /// was pending then: from a request on its way, or asked (see [`probe`]).
    pub(super) async fn revision_since(
        &self,
        since: Option<Instant>,
    ) -> Result<probe::Answer, StoreError> {
        self.probe
            .revision(since, || async {
                let options = etcd_client::GetOptions::new().with_keys_only();
                let now = self
                    .get_from_runtime(self.keys.pending(), Some(options), Trip::Probe)
                    .await?;
                Ok((
                    now.header().map_or(0, |h| h.revision()),
                    !now.kvs().is_empty(),
                ))
            })
            .await
    }

    /// A view of the copy for a read, once the copy has caught up with what the read must see
    /// (see [`Shared::read_view`]): waited for as a task on the client's runtime, so that the
    /// read needs no thread of its own. `None`: the read goes the long way (no copy, a write
    /// larger than a transaction pending, etcd unanswering, the copy lagging).
    pub(super) async fn view_from_runtime(&self, how: &ReadAs) -> Option<View<'_>> {
        let pending = self.keys.pending();
        if self.cache.snapshot()?.get(&pending).is_some() {
            return None;
        }
        let needed = if how.seen {
            self.written.load(Ordering::SeqCst)
        } else {
            match self.revision_since(how.since).await.ok()? {
                (_, true) => return None,
                (revision, false) => revision,
            }
        };
        if !self.cache.caught_up(needed, COPY_LAG).await {
            return None;
        }
        let copy = self.cache.snapshot()?;
        (copy.revision >= needed && copy.get(&pending).is_none()).then(|| View::inline(self, copy))
    }

    /// A view for a read that the copy answers as it stands, without waiting on etcd: the
    /// copy has caught up with what the read must see (for a read of what this server has seen, its own
    /// writes; for anyone else, the revision etcd gave after its request began, already asked
    /// by an earlier read of the request) and shows no write larger than a transaction
    /// pending. `None`: the read goes the long way ([`Shared::read_view`]).
    pub(super) fn view_now(&self, how: &ReadAs) -> Option<View<'_>> {
        let copy = self.cache.snapshot()?;
        if copy.get(&self.keys.pending()).is_some() {
            return None;
        }
        let needed = if how.seen {
            self.written.load(Ordering::SeqCst)
        } else {
            match self.probe.known(how.since?)? {
                (_, true) => return None,
                (revision, false) => revision,
            }
        };
        (copy.revision >= needed).then(|| View::inline(self, copy))
    }
}

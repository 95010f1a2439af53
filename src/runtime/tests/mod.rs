//! The in-process actor tier: the supervisor, the planner and the task runner, run in this
//! process on a real store, against a [`Scripted`] provisioner (a scenario of expected calls
//! and their answers, failing on a call missing or unexpected) with tokio's clock paused, so
//! backoff, keepalive and timeouts pass in virtual time, without sleeps.
//!
//! `TESTING.md` says when to use this tier and when another.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::prelude::*;
use ebb_spi::{
    Call, Context, Properties, PropertySpec, ProvisionError, Provisioner, ProvisionerSpec,
    Resource, ResourceKey, ResourceState,
};

use super::deps::{Deps, Member};
use super::planner::OpDone;
use super::registry::Registry;
use crate::store::Store;
use crate::store::events::Notifier;
use crate::store::secure::Cipher;

mod duties;
mod operations;
pub(crate) mod runs;

/// The scripted provisioner's name, as profiles and run records name it.
const SCRIPTED: &str = "scripted";

static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: SCRIPTED,
    label: "Scripted",
    description: "Answers as its scenario says (the actor tests' provisioner).",
    properties: &[] as &[PropertySpec],
};

/// One call the scenario expects, and what it answers.
#[derive(Debug)]
pub enum Expect {
    /// `create` of this node (and generation), answered after `after` of virtual time.
    Create {
        node: &'static str,
        generation: u32,
        after: Duration,
        answer: Result<Resource, ProvisionError>,
    },
    Find {
        node: &'static str,
        answer: Result<Option<Resource>, ProvisionError>,
    },
    Describe {
        id: &'static str,
        answer: Result<Option<Resource>, ProvisionError>,
    },
    Delete {
        id: &'static str,
        answer: Result<(), ProvisionError>,
    },
}

/// A provisioner that answers from a scenario: each call must be the next one expected.
#[derive(Debug, Default)]
pub struct Scripted {
    script: Mutex<VecDeque<Expect>>,
    /// Every call made, as `create master/0`, `describe i-1`...
    seen: Mutex<Vec<String>>,
    /// Calls that were not the next one expected.
    wrong: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Scripted {
    pub fn new(script: Vec<Expect>) -> Arc<Scripted> {
        Arc::new(Scripted {
            script: Mutex::new(script.into()),
            ..Scripted::default()
        })
    }

    /// Adds calls to the end of the scenario.
    pub fn then(&self, more: Vec<Expect>) {
        lock(&self.script).extend(more);
    }

    /// The calls made so far.
    pub fn seen(&self) -> Vec<String> {
        lock(&self.seen).clone()
    }

    /// Asserts that every call was expected and every expected call was made.
    #[track_caller]
    pub fn finished(&self) {
        let wrong = lock(&self.wrong).clone();
        assert!(
            wrong.is_empty(),
            "unexpected calls: {wrong:?}\nall calls: {:?}",
            self.seen()
        );
        let left: Vec<String> = lock(&self.script)
            .iter()
            .map(|e| format!("{e:?}"))
            .collect();
        assert!(
            left.is_empty(),
            "calls never made: {left:?}\nall calls: {:?}",
            self.seen()
        );
    }

    /// Takes the next expectation if `matches` says the call is it.
    fn next(&self, call: String, matches: impl FnOnce(&Expect) -> bool) -> Option<Expect> {
        lock(&self.seen).push(call.clone());
        let mut script = lock(&self.script);
        if script.front().is_some_and(matches) {
            return script.pop_front();
        }
        let expected = script.front().map(|e| format!("{e:?}"));
        lock(&self.wrong).push(format!("{call} (expected {expected:?})"));
        None
    }
}

fn unexpected<T>() -> Result<T, ProvisionError> {
    Err(ProvisionError::fatal("a call the scenario does not expect"))
}

impl Provisioner for Scripted {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn nodes(&self, _: &Properties) -> Vec<String> {
        vec!["master".into()]
    }

    fn create<'a>(&'a self, _: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        let call = format!("create {}/{}", key.node, key.generation);
        let expected = self.next(call, |e| {
            matches!(e, Expect::Create { node, generation, .. }
                if *node == key.node && *generation == key.generation)
        });
        Box::pin(async move {
            match expected {
                Some(Expect::Create { after, answer, .. }) => {
                    tokio::time::sleep(after).await;
                    answer
                }
                _ => unexpected(),
            }
        })
    }

    fn find<'a>(&'a self, _: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        let expected = self.next(
            format!("find {}", key.node),
            |e| matches!(e, Expect::Find { node, .. } if *node == key.node),
        );
        Box::pin(async move {
            match expected {
                Some(Expect::Find { answer, .. }) => answer,
                _ => unexpected(),
            }
        })
    }

    fn describe<'a>(&'a self, _: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        let expected = self.next(
            format!("describe {id}"),
            |e| matches!(e, Expect::Describe { id: want, .. } if *want == id),
        );
        Box::pin(async move {
            match expected {
                Some(Expect::Describe { answer, .. }) => answer,
                _ => unexpected(),
            }
        })
    }

    fn delete<'a>(&'a self, _: &'a Context, id: &'a str) -> Call<'a, ()> {
        let expected = self.next(
            format!("delete {id}"),
            |e| matches!(e, Expect::Delete { id: want, .. } if *want == id),
        );
        Box::pin(async move {
            match expected {
                Some(Expect::Delete { answer, .. }) => answer,
                _ => unexpected(),
            }
        })
    }

    fn list<'a>(&'a self, _: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Resource `id` in `state`.
pub fn resource(id: &str, state: ResourceState) -> Resource {
    Resource {
        id: id.into(),
        state,
        tags: Default::default(),
        address: Some("10.0.0.1".into()),
        properties: Default::default(),
    }
}

/// What the actors share, on a store in `dir`, with `provisioner` the only one.
pub fn deps(dir: &std::path::Path, provisioner: Arc<dyn Provisioner>) -> Deps {
    Deps {
        store: Store::open(dir).expect("store"),
        registry: Arc::new(Registry::only(provisioner)),
        data_dir: dir.to_path_buf(),
        work_dir: dir.join("work"),
        notifier: Notifier::default(),
        exe: "/bin/false".into(),
        server_name: "ebb".into(),
        cipher: Arc::new(Cipher::ephemeral()),
        member: Member::new("ebb"),
        check_slots: Arc::new(super::shares::Lanes::new(64, 16)),
        queue_news: Default::default(),
        calls: Default::default(),
    }
}

/// Runs `test` in an actor system whose tokio clock is paused (and ebb's clock with it).
pub fn paused<F, Fut>(test: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime")
    });
    system.block_on(async {
        crate::store::clock::follow_tokio();
        test().await;
    });
}

/// Collects the end of an operation.
#[derive(Debug)]
pub struct Ends(pub tokio::sync::mpsc::UnboundedSender<OpDone>);

impl Actor for Ends {
    type Context = actix::Context<Self>;
}

impl Handler<OpDone> for Ends {
    type Result = ();

    fn handle(&mut self, done: OpDone, _: &mut actix::Context<Self>) {
        let _ = self.0.send(done);
    }
}

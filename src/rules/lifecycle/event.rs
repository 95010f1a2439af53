//! What happens to a run ([`Event`]), what its supervisor must then do ([`Effect`]), and the
//! outcome of one event ([`Transition`]).

use crate::model::run::{Exit, RunRecord};

/// Something that happened to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The run is refused as it is recorded (a limit is reached), or after waiting in the
    /// queue too long.
    Reject(String),
    /// A QUEUED run leaves the queue to start, at `now_ms` (epoch milliseconds).
    Admit { now_ms: u64 },
    /// The supervisor takes up a PENDING run.
    Begin,
    /// The create operation made every node (or a reused cluster was made ready).
    Provisioned,
    /// The cluster the run took over failed to be made ready (its clean-up or its checks):
    /// it goes back to the run that left it, to be deprovisioned, and this run makes its own.
    ReuseFailed(String),
    /// The create operation gave up.
    ProvisionFailed(String),
    /// The create operation stopped early because it was cancelled.
    CreateStopped,
    /// The program process started.
    Launched,
    /// The program's output named the engine application it submitted.
    Application(crate::model::run::Application),
    /// The program could not be started.
    LaunchFailed(String),
    /// The program ended.
    Exited(Exit),
    /// The program ran on the host of a server that died, out of this server's reach.
    ProgramLost(String),
    /// A failed program's retry backoff is over: launch its next attempt.
    Relaunch,
    /// `POST .../stop`.
    Stop { keepalive: bool },
    /// The profile's timeout passed.
    TimedOut,
    /// A WAITING cluster's `expiresAt` passed.
    Expired,
    /// `POST .../deprovision`.
    Deprovision,
    /// An IDLE cluster is no longer wanted (its profile was disabled, or its pool holds more
    /// than its `max`), for this reason.
    Retire(String),
    /// `POST .../extend` with `expireAt`: the cluster is kept until `expire_at`; an earlier
    /// time than its deadline now is refused unless `shorten`.
    Extend { expire_at: u64, shorten: bool },
    /// `POST .../extend` with `by`: the cluster's deadline now moves `seconds` later.
    ExtendBy { seconds: u64 },
    /// The delete operation removed every node.
    Deprovisioned,
    /// The delete operation gave up.
    DeprovisionFailed(String),
    /// `POST .../deprovision?force=true`.
    ForceDeprovision,
}

/// What the supervisor must do after persisting a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Run (or resume) the create operation.
    CreateCluster,
    /// Make the cluster the run took over ready: clean the last run's directories, check
    /// its services.
    PrepareCluster,
    /// Ask the running create operation to stop after its in-flight calls.
    CancelCreate,
    /// Launch the program, or re-attach to it if it was launched already.
    Launch,
    /// Wait until the run's `relaunch_at`, then apply [`Event::Relaunch`].
    Relaunch,
    /// Stop the program.
    Kill,
    /// Run (or resume) the delete operation.
    DeleteCluster,
    /// Abandon the running delete operation.
    CancelDelete,
    /// The run needs no supervisor any more.
    Finish,
}

/// The outcome of one event.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub run: RunRecord,
    pub effects: Vec<Effect>,
    /// What changed, for the run's history.
    pub notes: Vec<String>,
}

impl Transition {
    pub(super) fn new(run: RunRecord) -> Self {
        Self {
            run,
            effects: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(super) fn effect(mut self, effect: Effect) -> Self {
        self.effects.push(effect);
        self
    }

    pub(super) fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

//! Wiring and lifetime of the server: open the store, load built-ins, resume live runs, serve,
//! shut down.
//!
//! Shutdown has two phases. The first SIGTERM or Ctrl-C stops accepting connections and lets
//! requests in flight finish; a second one cuts them off. Then the runtime's actors stop (their
//! progress is already persisted; programs keep running detached), and the store's writer
//! finishes every queued write and flushes before the process exits 0.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::Arbiter;
use actix_web::{App, HttpServer, middleware, web};

use crate::api::{self, AppState};
use crate::cli::ServeArgs;
use crate::runtime::janitor::Janitor;
use crate::runtime::registry::Registry;
use crate::runtime::{Deps, Runtime};
use crate::service::error::ServiceError;
use crate::service::{namespaces, profiles};
use crate::store::etcd::Endpoints;
use crate::store::events::Notifier;
use crate::store::secure::Cipher;
use crate::store::{Location, Store, StoreError};

/// How long in-flight requests get to finish after the first shutdown signal.
const GRACE: Duration = Duration::from_secs(10);

/// Everything `ebb serve` needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    /// Where the state is kept: `None` for the redb file in the data dir.
    pub etcd: Option<EtcdConfig>,
    /// How long an ended run's history is kept; `None` for ever.
    pub history_retention: Option<std::time::Duration>,
    /// How the scheduler fires schedules.
    pub scheduler: crate::service::starts::scheduler::Settings,
    /// Host names, besides IP addresses and `localhost`, that requests may be addressed to.
    pub allowed_hosts: Vec<String>,
    /// Where programs and provisioners work; `None` for `<data-dir>-work`.
    pub work_dir: Option<PathBuf>,
    /// Directories of plugin directories (`--plugin-dir`); empty: `<data-dir>/plugins`, when
    /// it exists.
    pub plugin_dirs: Vec<PathBuf>,
    pub bind: String,
    pub auth_token: Option<String>,
    /// A file holding the token (kept out of the process list); owner-only.
    pub token_file: Option<PathBuf>,
    /// No tokens at all: every request is an instance admin's (loopback binds only).
    pub no_auth: bool,
    /// Serve plain HTTP on an address other hosts can reach.
    pub insecure_http: bool,
    /// The certificate chain and private key (PEM) to serve HTTPS with.
    pub tls: Option<TlsFiles>,
    /// A CA certificate (PEM) to trust for the other servers' HTTPS.
    pub ca_cert: Option<PathBuf>,
    /// HTTP worker threads; `None` for one per core.
    pub workers: Option<usize>,
    /// This server's name, tagged on every resource it makes; `None` for the one kept in the
    /// store (made on first start).
    pub server_name: Option<String>,
    /// The key file of the secure store; `None` for `secure.key` in the data dir.
    pub secure_key_file: Option<PathBuf>,
    /// On etcd: the time to live of this server's lease.
    pub lease_ttl: std::time::Duration,
    /// On etcd: where the other servers reach this one; `None` for its listening address.
    pub advertise_url: Option<String>,
    /// On etcd: SIGTERM hands this server's runs to the others before it stops.
    pub drain: bool,
    /// How the janitor sweeps on its own.
    pub janitor: crate::model::sweep::Settings,
}

/// The PEM files `ebb serve` serves HTTPS with.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The etcd cluster a server keeps its state in, as given.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs, comma-separated; `None` when none were given.
    pub endpoints: Option<String>,
    pub prefix: String,
    /// TLS and etcd's users.
    pub access: crate::store::etcd::Access,
}

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot load built-in data: {0}")]
    Setup(#[from] ServiceError),
    #[error("cannot listen on {addr}: {source}; choose another address with --bind or EBB_BIND")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot listen for shutdown signals: {0}")]
    Signals(std::io::Error),
    #[error("server stopped with an error: {0}")]
    Serve(std::io::Error),
    #[error("cannot find the ebb executable (it launches programs): {0}")]
    Exe(std::io::Error),
    #[error(transparent)]
    KeyFile(#[from] crate::store::secure::KeyFileError),
    #[error(transparent)]
    Seal(#[from] crate::store::migrate::SealError),
    #[error("cannot prepare {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error(
        "the data dir {0} is in use by another process; stop the other ebb server or choose another --data-dir"
    )]
    DataDirInUse(PathBuf),
    #[error(
        "the secure store key {0} is not the key this installation's secure keys are sealed with; every server of an installation must use the same key file (copy it from the first server, or pass --secure-key-file)"
    )]
    OtherKey(PathBuf),
    #[error("--etcd-endpoints: {0}")]
    Etcd(String),
    #[error("--token-file {0}: {1}")]
    TokenFile(PathBuf, String),
    #[error("{0}")]
    Access(String),
    #[error("{0}")]
    Tls(String),
}

/// The file in the data dir that keeps the highest access generation this server has seen
/// (see `service::tokens::generation`).
pub const GENERATION_FILE: &str = "access.generation";

/// Holds the data dir for this server: its run directories and key are its own.
fn lock_data_dir(data_dir: &Path) -> Result<std::fs::File, ServerError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("server.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| ServerError::Dir(path, e))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(|_| ServerError::DataDirInUse(data_dir.to_path_buf()))?;
    Ok(file)
}

/// Where the store is.
fn location(config: &Config, data_dir: &Path) -> Result<Location, ServerError> {
    Ok(match &config.etcd {
        None => Location::Redb(data_dir.to_path_buf()),
        Some(etcd) => Location::Etcd(
            Endpoints::parse(
                etcd.endpoints.as_deref().unwrap_or(""),
                &etcd.prefix,
                etcd.access.clone(),
            )
            .map_err(ServerError::Etcd)?,
        ),
    })
}

/// Runs the server until it is told to stop. Must run inside an actix system.
pub async fn run(config: Config) -> Result<(), ServerError> {
    // Catch signals from the very start, so a SIGTERM during start-up is a clean stop too.
    let signals = Signals::install().map_err(ServerError::Signals)?;
    // A bad token file stops the start before anything is opened or resumed.
    let token = auth_token(&config)?.map(|t| crate::service::tokens::FixedToken::new(&t));
    if config.no_auth && token.is_some() {
        return Err(ServerError::Access(
            "--no-auth and a token (--token, EBB_TOKEN or --token-file) contradict each other; give one".into(),
        ));
    }
    let tls = match &config.tls {
        Some(files) => Some(
            crate::api::tls::server_config(&files.cert, &files.key).map_err(ServerError::Tls)?,
        ),
        None => None,
    };
    // Everything the server makes is its own: the store, the key, run directories, sandboxes.
    crate::runtime::confine::owner_only();
    // Programs run as this user: they must not read this process's memory or environment.
    crate::runtime::confine::not_dumpable();
    // Programs and scripts run in other directories: every path handed to them (the cluster
    // file, the result file) must not depend on the server's working directory.
    let (data_dir, work_dir) = directories(&config)?;
    let location = location(&config, &data_dir)?;
    // The redb file locks the data dir; with the store elsewhere, a lock file does.
    let _lock = match &location {
        Location::Redb(_) => None,
        Location::Etcd(_) => Some(lock_data_dir(&data_dir)?),
    };
    let store = tokio::task::spawn_blocking(move || Store::open_at(&location))
        .await
        .map_err(|e| StoreError::Storage(format!("opening the store failed: {e}")))??;
    if let Some(file) = store.file() {
        crate::runtime::confine::private_file(file)
            .map_err(|e| ServerError::Dir(file.to_path_buf(), e))?;
    }
    let config = Config { data_dir, ..config };
    tracing::info!(store = %store.describe(), "store opened");
    let key_file = config
        .secure_key_file
        .clone()
        .unwrap_or_else(|| config.data_dir.join("secure.key"));
    let cipher = Arc::new(Cipher::load_or_create(&key_file)?);
    cipher.keep_generation_in(&config.data_dir.join(GENERATION_FILE))?;
    if crate::store::secure::key_of_installation(&store, Arc::clone(&cipher)).await? == Some(false)
    {
        return Err(ServerError::OtherKey(key_file));
    }
    // From here on the store is read and written sealed; what an older version left unsealed
    // is sealed first, once.
    let sealing =
        crate::store::migrate::seal_installation(&store, &cipher, crate::service::upgrade::record)
            .await?;
    if sealing.sealed > 0 || !sealing.dropped.is_empty() {
        tracing::info!(
            records = sealing.sealed,
            "sealed the records of a store of schema version 2"
        );
    }
    for (table, key) in &sealing.dropped {
        tracing::warn!(
            store.table = table,
            store.key = %key,
            "a record the installation had refused (not signed by it) was deleted when the store was sealed"
        );
    }
    let store = store.sealed(Arc::clone(&cipher));
    if !crate::store::secure::same_key_as_installation(&store, Arc::clone(&cipher)).await? {
        return Err(ServerError::OtherKey(key_file));
    }
    let registry = Arc::new(Registry::with_plugins(&plugin_dirs(&config), &work_dir));
    load_builtins(&store, &registry).await?;
    let access = if config.no_auth {
        api::state::Access::Open
    } else {
        if token.is_none()
            && let Some(path) =
                crate::service::tokens::first_start(&store, &config.data_dir).await?
        {
            tracing::info!(
                file = %path.display(),
                "first start: an instance-admin token named admin is in this file (owner-only); the CLI reads it from there"
            );
        }
        api::state::Access::Tokens { fixed: token }
    };

    let shared = config.etcd.is_some();
    let given = config.server_name.clone().filter(|n| !n.trim().is_empty());
    let server_name = server_name(&store, given.clone()).await?;
    tracing::info!(server.name = %server_name, "server name");
    // Among several servers (etcd) each needs its own name: the one given, or its host's.
    let member = match (shared, given) {
        (true, None) => default_member_name(&config.bind),
        _ => server_name.clone(),
    };

    let exe = crate::runtime::program::launcher(std::env::current_exe().map_err(ServerError::Exe)?);
    let arbiter = Arbiter::new();
    let deps = Deps {
        // Runs pause while the store cannot be reached, and carry on when it is back.
        store: store.patient(),
        registry: Arc::clone(&registry),
        data_dir: config.data_dir.clone(),
        work_dir,
        notifier: Notifier::default(),
        exe,
        server_name,
        cipher: Arc::clone(&cipher),
        member: crate::runtime::deps::Member::new(&member),
        check_slots: Arc::new(crate::runtime::shares::Lanes::new(
            crate::runtime::checker::MAX_RUNNING_ON_SERVER,
            crate::runtime::checker::MAX_RUNNING_PER_NAMESPACE,
        )),
        queue_news: Default::default(),
        calls: Default::default(),
    };
    let janitor = Janitor::new(deps.clone(), config.janitor);
    arbiter.spawn(janitor.clone().run_local_sweeps());
    // Long polls on this server hear of events any server appends.
    if let Some(news) = deps.store.run_news() {
        let notifier = deps.notifier.clone();
        arbiter.spawn(async move { notifier.follow(news).await });
    }
    let runtime = Runtime::new(deps, arbiter.handle());
    if !shared {
        // One server owns every run; with several, each claims its share once it has joined.
        let resumed = runtime.resume().await?;
        tracing::info!(runs = resumed, "live runs resumed");
    }
    spawn_duties(&arbiter, &runtime, &janitor, &config, &store);

    let state = AppState {
        store: store.clone(),
        registry,
        runtime,
        cipher,
        janitor,
        access,
        allowed_hosts: Arc::from(config.allowed_hosts.clone()),
        forwarder: api::forward::client(config.ca_cert.as_deref()).map_err(ServerError::Tls)?,
        shutdown: Arc::default(),
        https: config.tls.is_some(),
        streams: api::streams::Streams::default(),
        sign_ins: Arc::default(),
        metrics: metrics_recorder(),
    };
    let served = serve(state, &config, tls, signals, &arbiter).await?;
    // Actors stop where they are: every step they took is already in the store, and programs
    // run on in their own process groups; the next start resumes them.
    arbiter.stop();
    let _ = tokio::task::spawn_blocking(move || arbiter.join()).await;
    store.close().await?;
    tracing::info!("store flushed; stopped");
    served.map_err(ServerError::Serve)
}

/// The data and work directories as absolute paths, made owner-only.
fn directories(config: &Config) -> Result<(PathBuf, PathBuf), ServerError> {
    let data_dir = std::path::absolute(&config.data_dir).unwrap_or(config.data_dir.clone());
    let work_dir = match &config.work_dir {
        Some(dir) => std::path::absolute(dir).unwrap_or(dir.clone()),
        None => crate::runtime::confine::default_work_dir(&data_dir),
    };
    for dir in [&data_dir, &work_dir] {
        crate::runtime::confine::private_dir(dir).map_err(|e| ServerError::Dir(dir.clone(), e))?;
    }
    Ok((data_dir, work_dir))
}

/// The default namespace and the built-in profiles and templates.
/// The plugin directories: those given, else `<data-dir>/plugins` when there is one.
fn plugin_dirs(config: &Config) -> Vec<PathBuf> {
    if !config.plugin_dirs.is_empty() {
        return config.plugin_dirs.clone();
    }
    let default = config.data_dir.join("plugins");
    if default.is_dir() {
        vec![default]
    } else {
        Vec::new()
    }
}

async fn load_builtins(store: &Store, registry: &Registry) -> Result<(), ServerError> {
    namespaces::ensure_default(store).await?;
    let profiles = profiles::load_builtin(store, registry).await?;
    tracing::info!(profiles = profiles.len(), "built-in profiles loaded");
    let templates = crate::service::templates::load_builtin(store).await?;
    tracing::info!(templates, "built-in templates loaded");
    Ok(())
}

/// Serves the API on `config.bind` until a signal: the first finishes requests in flight, a
/// second cuts them off. Fails only when the address cannot be bound.
async fn serve(
    state: AppState,
    config: &Config,
    tls: Option<rustls::ServerConfig>,
    mut signals: Signals,
    arbiter: &Arbiter,
) -> Result<std::io::Result<()>, ServerError> {
    let runtime = state.runtime.clone();
    let shutdown = Arc::clone(&state.shutdown);
    let data = web::Data::new(state);
    let peers = web::Data::new(api::bodies::peer_slots());
    let https = tls.is_some();
    let mut server = HttpServer::new(move || {
        // Over HTTPS, browsers are told to come back only over HTTPS (HSTS).
        let hsts = middleware::DefaultHeaders::new()
            .add(("Strict-Transport-Security", "max-age=31536000"));
        App::new()
            .app_data(data.clone())
            .app_data(peers.clone())
            .wrap(middleware::Condition::new(https, hsts))
            .wrap(middleware::from_fn(api::bodies::bound))
            .wrap(middleware::from_fn(api::guard_origin))
            .wrap(middleware::from_fn(api::log_request))
            .configure(crate::ui::configure)
            .configure(api::configure)
    })
    .disable_signals()
    .shutdown_timeout(GRACE.as_secs())
    // A request head arrives within 5 s, or the connection is closed.
    .client_request_timeout(std::time::Duration::from_secs(5));
    let workers = config.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    server = server
        .workers(workers)
        .max_connections(connections_per_worker(workers));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let bound = match tls {
        Some(tls) => server.bind_rustls_0_23(&config.bind, tls),
        None => server.bind(&config.bind),
    };
    let server = bound.map_err(|source| ServerError::Bind {
        addr: config.bind.clone(),
        source,
    })?;
    let addrs: Vec<SocketAddr> = server.addrs();
    check_exposure(config, scheme, &addrs)?;
    for addr in &addrs {
        tracing::info!(addr = %addr, url = %format!("{scheme}://{addr}"), "listening");
    }
    // Join the installation before answering: a start needs this server's lease.
    let membership = crate::runtime::membership::Settings {
        url: config
            .advertise_url
            .clone()
            .or_else(|| addrs.first().map(|a| format!("{scheme}://{a}")))
            .unwrap_or_default(),
        ttl: config.lease_ttl,
    };
    crate::runtime::membership::join(runtime.deps(), &membership).await?;
    arbiter.spawn(crate::runtime::membership::run(runtime.clone(), membership));
    let server = server.run();
    let handle = server.handle();
    let drain = config.drain;
    actix_web::rt::spawn(async move {
        tokio::select! {
            () = signals.next() => {
                if drain {
                    // Hand the runs over first; a second signal stops at once.
                    tokio::select! {
                        drained = crate::runtime::membership::drain(&runtime) => {
                            if let Err(e) = drained {
                                tracing::error!(error = %e, "drain did not finish");
                            }
                        }
                        () = signals.next() => tracing::warn!("drain cut short by a second signal"),
                    }
                }
            }
            () = shutdown.notified() => {}
        }
        tracing::info!("shutting down: finishing requests in flight (signal again to force)");
        let graceful = handle.stop(true);
        tokio::select! {
            () = graceful => {}
            () = signals.next() => {
                tracing::warn!("forced shutdown: cutting off requests in flight");
                handle.stop(false).await;
            }
        }
    });
    Ok(server.await)
}

/// Descriptors kept for the store, the etcd client, programs' files and the rest.
const RESERVED_FILES: u64 = 256;

/// How many connections each of `workers` takes at once: the descriptors this process may
/// open (its soft limit raised to the hard one), less [`RESERVED_FILES`], shared out. Past
/// it a worker stops accepting until one closes, so connections never take the descriptors
/// the store needs.
fn connections_per_worker(workers: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
        && current < maximum
    {
        limit.current = Some(maximum);
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    let files = limit.current.unwrap_or(1 << 20).min(1 << 20);
    let each = files.saturating_sub(RESERVED_FILES) / workers.max(1) as u64;
    usize::try_from(each)
        .unwrap_or(usize::MAX)
        .clamp(16, 25_000)
}

/// Refuses what would expose the API to other hosts unprotected: plain HTTP on an address
/// they can reach (unless `--insecure-http`), and `--no-auth` on any such address at all.
/// Installs the process's metrics recorder, with the buckets of `model::metrics`, and
/// describes every metric; `None` (and a warning) when one is installed already.
fn metrics_recorder() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    use crate::model::metrics::{ALL, BATCH_BUCKETS, Kind, SECONDS_BUCKETS, STORE_COMMIT_BATCH};
    use crate::model::metrics::{
        BUDGET_USED, CLUSTERS_NEEDING_ATTENTION, LIVE_CLUSTERS, LIVE_NODES, LIVE_RUNS,
        POOL_CLUSTERS,
    };
    const LIVE: [&str; 6] = [
        LIVE_RUNS.name,
        LIVE_CLUSTERS.name,
        LIVE_NODES.name,
        CLUSTERS_NEEDING_ATTENTION.name,
        POOL_CLUSTERS.name,
        BUDGET_USED.name,
    ];
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let built = PrometheusBuilder::new()
        .set_buckets(SECONDS_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(STORE_COMMIT_BATCH.name.to_string()),
                BATCH_BUCKETS,
            )
        })
        .and_then(|b| b.install_recorder());
    let handle = match built {
        Ok(handle) => handle,
        Err(e) => {
            tracing::warn!(error = %e, "metrics are not recorded");
            return None;
        }
    };
    for m in ALL {
        match m.kind {
            Kind::Counter => metrics::describe_counter!(m.name, m.help),
            Kind::Histogram => metrics::describe_histogram!(m.name, m.help),
            // The live gauges are read from the store at each scrape.
            Kind::Gauge if LIVE.contains(&m.name) => {}
            // Exported from the start: 0 until something sets it.
            Kind::Gauge => {
                metrics::describe_gauge!(m.name, m.help);
                metrics::gauge!(m.name).set(0.0);
            }
        }
    }
    Some(handle)
}

fn check_exposure(config: &Config, scheme: &str, addrs: &[SocketAddr]) -> Result<(), ServerError> {
    let exposed = addrs.iter().any(|a| !a.ip().is_loopback());
    if exposed && config.no_auth {
        return Err(ServerError::Access(format!(
            "--no-auth is allowed only on a loopback address, and {} is not one; bind to 127.0.0.1 or drop --no-auth",
            config.bind
        )));
    }
    if exposed && scheme == "http" && !config.insecure_http {
        return Err(ServerError::Access(format!(
            "{} can be reached from other hosts, and tokens would cross the network in plain text; serve HTTPS with --tls-cert and --tls-key, or pass --insecure-http (behind a TLS proxy, say)",
            config.bind
        )));
    }
    if config.no_auth {
        tracing::warn!(
            "--no-auth: every request is an instance admin's; anyone on this host can use the API"
        );
    }
    Ok(())
}

/// The bearer token: `--token-file`'s content, or `--token`/`EBB_TOKEN`; not both. A token
/// file others can read is refused, as the secure store's key file is.
fn auth_token(config: &Config) -> Result<Option<String>, ServerError> {
    let given = config.auth_token.clone().filter(|t| !t.is_empty());
    let Some(path) = &config.token_file else {
        return Ok(given);
    };
    let fail = |m: String| ServerError::TokenFile(path.clone(), m);
    if given.is_some() {
        return Err(fail(
            "give the token either in a file or with --token/EBB_TOKEN, not both".into(),
        ));
    }
    let bytes = crate::store::secure::read_owner_only(path, 4096).map_err(fail)?;
    let text = String::from_utf8(bytes).map_err(|_| fail("is not UTF-8 text".into()))?;
    let token = text.trim_end_matches(['\n', '\r']).to_string();
    if token.trim().is_empty() {
        return Err(fail("is empty".into()));
    }
    Ok(Some(token))
}

/// Spawns every installation-wide duty, each run by the one duty runner
/// ([`crate::runtime::duty`]): leadership, draining, panics.
fn spawn_duties(
    arbiter: &Arbiter,
    runtime: &Runtime,
    janitor: &Janitor,
    config: &Config,
    store: &Store,
) {
    use crate::runtime::duty::run;
    let (store_of, member) = (runtime.deps().store.clone(), runtime.deps().member.clone());
    if let Some(every) = janitor.settings.interval.filter(|s| *s > 0) {
        let sweeps = crate::runtime::janitor::Sweeps {
            janitor: janitor.clone(),
            every: Duration::from_secs(every),
        };
        arbiter.spawn(run(store_of.clone(), member.clone(), sweeps));
    }
    if let Some(retention) = config.history_retention {
        let compaction = crate::runtime::retention::Compaction {
            store: store.patient(),
            retention,
        };
        arbiter.spawn(run(store_of.clone(), member.clone(), compaction));
    }
    let scheduler =
        crate::service::starts::scheduler::Scheduler::new(runtime.clone(), config.scheduler);
    arbiter.spawn(run(store_of.clone(), member.clone(), scheduler));
    // Its own thread: a slot that frees is taken at once, however busy the supervisors'.
    let dispatcher = crate::service::starts::queue::Dispatcher::new(runtime.clone());
    Arbiter::new().spawn(run(store_of.clone(), member.clone(), dispatcher));
    let pools = crate::service::starts::pool::Pools::new(runtime.clone());
    arbiter.spawn(run(store_of.clone(), member.clone(), pools));
    let ledger = crate::service::usage::Ledger(runtime.clone());
    arbiter.spawn(run(store_of, member, ledger));
}

/// Key of the generated server name in the store's `Meta` table.
const SERVER_NAME_KEY: &str = "server_name";

/// The server's name: `given`, else the one kept in the store, else a new unique one (kept).
/// Two servers left at their defaults never share a name, so neither's janitor takes the
/// other's resources for its own.
/// A server's name among several when none is given: its host's name and its port.
fn default_member_name(bind: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let port = bind.rsplit(':').next().unwrap_or_default();
    let name: String = format!("{}-{port}", host.trim())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(crate::model::names::MAX_LEN)
        .collect();
    name.trim_matches('-').to_string()
}

async fn server_name(store: &Store, given: Option<String>) -> Result<String, ServerError> {
    if let Some(name) = given.filter(|n| !n.trim().is_empty()) {
        crate::model::names::check("--server-name", &name).map_err(ServiceError::from)?;
        return Ok(name);
    }
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Storage(format!("cannot make a server name: {e}")))?;
    let made: String = std::iter::once("ebb-".to_string())
        .chain(bytes.iter().map(|b| format!("{b:02x}")))
        .collect();
    let name = store
        .write(move |tx| {
            use crate::store::Read as _;
            if let Some(name) = tx.get::<String>(crate::store::Table::Meta, SERVER_NAME_KEY)? {
                return Ok::<_, ServiceError>(name);
            }
            tx.put(crate::store::Table::Meta, SERVER_NAME_KEY, &made)?;
            Ok(made.clone())
        })
        .await?;
    Ok(name)
}

/// SIGTERM and SIGINT (Ctrl-C), listened to from start-up on.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Resolves at the next signal.
    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

impl From<ServeArgs> for Config {
    /// The configuration `ebb serve` was given on its command line.
    fn from(args: ServeArgs) -> Config {
        Config {
            data_dir: args.data_dir,
            etcd: (args.store == crate::cli::StoreKind::Etcd).then_some(EtcdConfig {
                endpoints: args.etcd_endpoints,
                prefix: args.etcd_prefix,
                access: args.etcd_access.into(),
            }),
            history_retention: args.history_retention.0.filter(|d| !d.is_zero()),
            scheduler: crate::service::starts::scheduler::Settings {
                grace: args.schedule_grace,
                namespace_rate: args.schedule_namespace_rate,
            },
            work_dir: args.work_dir,
            plugin_dirs: args.plugin_dirs,
            allowed_hosts: args.allowed_hosts,
            bind: args.bind,
            auth_token: args.token,
            token_file: args.token_file,
            no_auth: args.no_auth,
            ca_cert: args.ca_cert,
            insecure_http: args.insecure_http,
            tls: match (args.tls_cert, args.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
                _ => None,
            },
            workers: args.workers,
            server_name: args.server_name,
            secure_key_file: args.secure_key_file,
            lease_ttl: args.lease_ttl,
            advertise_url: args.advertise_url,
            drain: args.drain,
            janitor: crate::model::sweep::Settings {
                interval: args
                    .janitor_interval
                    .0
                    .map(|d| d.as_secs())
                    .filter(|s| *s > 0),
                delete: args.janitor_delete,
            },
        }
    }
}

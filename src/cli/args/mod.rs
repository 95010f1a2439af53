//! The command line's arguments: every command, subcommand and flag (clap derive types).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod namespace;
mod plugin;
mod run;
mod schedule;
pub use namespace::NamespaceCmd;
pub use plugin::{PluginCmd, PluginTestArgs};
pub use run::RunCmd;
pub use schedule::{ScheduleCmd, ScheduleSpec};

/// Default address of the server, for `serve --bind` and the client's `--server`.
pub const DEFAULT_BIND: &str = "127.0.0.1:11015";

#[derive(Debug, Parser)]
#[command(
    name = "ebb",
    version,
    about = "A runtime for ephemeral clusters",
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// URL of the ebb server.
    #[arg(
        long,
        env = "EBB_SERVER",
        default_value = "http://127.0.0.1:11015",
        global = true
    )]
    pub server: String,
    /// Bearer token sent by client commands (default: the one in --token-file, else the
    /// first token `ebb serve` wrote to <data dir>/admin.token, when this user can read it).
    /// Given to `serve`, it is a fixed instance-admin token for scripts.
    #[arg(long, env = "EBB_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Read the bearer token from this file (owner-only), so it shows in no process list.
    /// Given to `serve`, the file holds its fixed instance-admin token.
    #[arg(long, env = "EBB_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// Directory of the store (with `serve --store redb`) and everything the server keeps.
    /// Client commands given no token use the first token `serve` wrote there (admin.token).
    #[arg(
        long,
        env = "EBB_DATA_DIR",
        default_value = "./ebb-data",
        global = true
    )]
    pub data_dir: PathBuf,
    /// Trust this CA certificate (PEM) for an https:// server, besides the system's roots.
    /// Given to `serve`, it is trusted for the other servers of the installation.
    #[arg(long, env = "EBB_CA_CERT", global = true)]
    pub ca_cert: Option<PathBuf>,
    /// Print the server's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the ebb server.
    Serve(Box<ServeArgs>),
    /// Manage namespaces.
    #[command(subcommand, alias = "ns")]
    Namespace(NamespaceCmd),
    /// List the provisioners the server offers.
    #[command(subcommand)]
    Provisioner(ProvisionerCmd),
    /// Manage compute profiles.
    #[command(subcommand)]
    Profile(Box<ProfileCmd>),
    /// Manage preferences (instance, namespace, app or program level).
    #[command(subcommand, alias = "preference")]
    Pref(PrefCmd),
    /// Deploy and manage apps.
    #[command(subcommand)]
    App(AppCmd),
    /// Start, watch and manage program runs and their clusters.
    #[command(subcommand)]
    Run(RunCmd),
    /// Schedules: start a program's runs at cron times or when another program's runs end.
    #[command(subcommand)]
    Schedule(Box<ScheduleCmd>),
    /// Manage cluster templates.
    #[command(subcommand)]
    Template(TemplateCmd),
    /// Show the layout and task plan of a cluster operation without running anything.
    Plan(PlanArgs),
    /// Keep secrets (cloud keys, passwords) that profiles refer to as ${secure(name)}.
    #[command(subcommand)]
    Secure(SecureCmd),
    /// Sweep the clouds for resources with ebb's tags that no run accounts for.
    #[command(subcommand)]
    Janitor(JanitorCmd),
    /// The servers of the installation.
    #[command(subcommand)]
    Server(ServerCmd),
    /// Make, list and revoke access tokens.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Who changed what: the audit log of a namespace, or of the instance.
    Audit(AuditArgs),
    /// What runs used and cost: runs by outcome, node-hours and cost, over a range of days,
    /// grouped as asked (a namespace's viewers see its usage; instance admins every one's).
    Usage(UsageArgs),
    /// The price table that prices node-hours (instance admins replace it).
    #[command(subcommand)]
    Prices(PricesCmd),
    /// Work on a store directly, with every server on it stopped.
    #[command(subcommand)]
    Store(StoreCmd),
    /// Plugins: provisioners as outside programs. `list` asks the server what it loaded;
    /// `test` drives a plugin through the contract's cases, without a server.
    #[command(subcommand)]
    Plugin(PluginCmd),
    /// Launches a program detached from the server (used by the server itself).
    #[command(hide = true)]
    Shim { run_dir: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum SecureCmd {
    /// List a namespace's secure keys (names and metadata, never data).
    List {
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// Show a secure key's metadata.
    Get {
        name: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// Create or replace a secure key. The secret is read from standard input (or a file), so
    /// it shows in neither the shell's history nor the process list.
    Put {
        name: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
        #[arg(long)]
        description: Option<String>,
        /// Read the secret from this file instead of standard input.
        #[arg(long, value_name = "FILE")]
        data_file: Option<PathBuf>,
        /// Metadata to keep with the key.
        #[arg(long = "property", value_name = "NAME=VALUE")]
        properties: Vec<String>,
    },
    /// Delete a secure key.
    Delete {
        name: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Make a token; its secret is printed once, and never shown again.
    Create {
        name: String,
        /// A namespace to give the token a role in; pair each with a --role, in order.
        #[arg(long = "namespace", short = 'n', value_name = "NS")]
        namespaces: Vec<String>,
        /// The role in the --namespace at the same place: viewer, operator or admin.
        #[arg(long = "role", value_name = "ROLE")]
        roles: Vec<String>,
        /// Every right, in every namespace and over the instance.
        #[arg(long)]
        instance_admin: bool,
        /// Reads GET /metrics, which shows every namespace's figures (a scraper's token, with
        /// or without roles); only an instance admin makes one.
        #[arg(long)]
        metrics: bool,
        /// How long the token works (30d, 12h); for ever when left out.
        #[arg(long, value_name = "DUR")]
        expires: Option<String>,
    },
    /// List the tokens this token may manage (never their secrets).
    List,
    /// Revoke a token: it stops working at once.
    Revoke { name: String },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The namespace whose changes to list (default: the instance-wide ones).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Only changes of the last DUR (1h, 7d).
    #[arg(long, value_name = "DUR")]
    pub since: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only this namespace's usage (needed unless the token is an instance admin's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    #[arg(long)]
    pub app: Option<String>,
    #[arg(long)]
    pub program: Option<String>,
    /// A profile: SCOPE:name, or a name.
    #[arg(long)]
    pub profile: Option<String>,
    #[arg(long)]
    pub provisioner: Option<String>,
    /// The first day counted (2026-11-01, UTC; default: the first of this month).
    #[arg(long, value_name = "DATE")]
    pub from: Option<String>,
    /// The day after the last counted (2026-12-01; default: tomorrow).
    #[arg(long, value_name = "DATE")]
    pub to: Option<String>,
    /// Comma-separated: namespace, app, program, profile, provisioner, and one of day, week,
    /// month.
    #[arg(long, value_name = "DIMS")]
    pub group_by: Option<String>,
    /// table, csv or json.
    #[arg(long, default_value = "table")]
    pub format: String,
}

#[derive(Debug, Subcommand)]
pub enum PricesCmd {
    /// Show the price table in force.
    Get,
    /// Replace the price table with the one in FILE (JSON, as `ebb prices get --json` prints
    /// it): runs whose usage is fixed from now on are priced by it.
    Set { file: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum ServerCmd {
    /// List the servers that are up: address, lease, last heartbeat, runs owned, version.
    List,
    /// Hand a server's runs to the others, then stop it; waits until it is gone.
    Drain { name: String },
}

#[derive(Debug, Subcommand)]
pub enum JanitorCmd {
    /// Sweep now: report orphans and delete them (only report with --dry-run).
    Run {
        #[arg(long)]
        dry_run: bool,
    },
    /// Show the janitor's settings and its last sweep.
    Show,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Which store a server keeps its state in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// One file in the data directory: one server.
    Redb,
    /// An etcd cluster, which several servers of one installation share.
    Etcd,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// From the global --data-dir.
    #[arg(skip)]
    pub data_dir: PathBuf,
    /// Where the server keeps its state: `redb`, a file in the data directory, or `etcd`,
    /// shared by every server of an installation (see --etcd-endpoints).
    #[arg(long, env = "EBB_STORE", value_enum, default_value = "redb")]
    pub store: StoreKind,
    /// etcd's client URLs, comma-separated (with --store etcd).
    #[arg(long, env = "EBB_ETCD_ENDPOINTS", value_name = "URLS")]
    pub etcd_endpoints: Option<String>,
    /// The key prefix of this installation in etcd: installations sharing an etcd cluster
    /// use different prefixes.
    #[arg(long, env = "EBB_ETCD_PREFIX", default_value = "/ebb")]
    pub etcd_prefix: String,
    #[command(flatten)]
    pub etcd_access: EtcdAccessArgs,
    /// How long the history of an ended run is kept (its record, events and audit log)
    /// before it is compacted; profile usage totals are kept ("off" keeps it for ever).
    #[arg(long, env = "EBB_HISTORY_RETENTION", default_value = "30d", value_parser = parse_interval)]
    pub history_retention: Interval,
    /// How late a schedule's cron time may be fired and still run whatever the schedule's
    /// `catchUp`: older ones were missed (no server fired schedules then) and follow it.
    #[arg(long, env = "EBB_SCHEDULE_GRACE", default_value = "60s", value_parser = ebb_spi::parse_duration)]
    pub schedule_grace: std::time::Duration,
    /// How many fires a second the schedules of one namespace make at most (in bursts of ten
    /// seconds' worth); a fire held back waits (one schedule fires at most once a second,
    /// in bursts of 60).
    #[arg(long, env = "EBB_SCHEDULE_NAMESPACE_RATE", default_value = "20")]
    pub schedule_namespace_rate: std::num::NonZeroU32,
    /// Directory of what programs and provisioners work in: programs' working directories,
    /// `local` sandboxes, the `sim` cloud's files. Kept apart from the data dir, which holds
    /// the store and the secure key (default: `<data-dir>-work`, next to it).
    #[arg(long, env = "EBB_WORK_DIR")]
    pub work_dir: Option<PathBuf>,
    /// A directory of plugins (one directory each, with its plugin.json): provisioners as
    /// outside programs. Repeat it for several (default: `<data-dir>/plugins`, when it exists).
    /// Its files must be writable by the server's user only.
    #[arg(
        long = "plugin-dir",
        env = "EBB_PLUGIN_DIRS",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub plugin_dirs: Vec<PathBuf>,
    /// A host name clients use to reach the server (its DNS name behind a proxy, say).
    /// Requests addressed to any other name are refused, so a web page cannot reach the API by
    /// pointing a name of its own at this address. IP addresses and `localhost` always work.
    #[arg(
        long = "allowed-host",
        env = "EBB_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub allowed_hosts: Vec<String>,
    /// Address to listen on (port 0 picks a free port, logged at start).
    #[arg(long, env = "EBB_BIND", default_value = DEFAULT_BIND)]
    pub bind: String,
    /// Log format.
    #[arg(long, env = "EBB_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// HTTP worker threads (default: one per core).
    #[arg(long, env = "EBB_WORKERS")]
    pub workers: Option<usize>,
    /// This server's name, tagged (ebb:server) on every cloud resource it makes; its janitor
    /// only touches resources carrying it. Default: a unique name made on first start and kept
    /// in the store. Set it when a rebuilt store must still know the resources of the old one.
    /// On etcd it also names the server among the servers of the installation, which must
    /// differ (default there: <host name>-<port>).
    #[arg(long, env = "EBB_SERVER_NAME")]
    pub server_name: Option<String>,
    /// On etcd: the time to live of this server's lease. When the server stops answering for
    /// this long, the other servers take its runs over.
    #[arg(long, env = "EBB_LEASE_TTL", default_value = "10s", value_parser = parse_lease_ttl)]
    pub lease_ttl: std::time::Duration,
    /// On etcd: the URL the other servers reach this one's API at (default: http:// and the
    /// address it listens on).
    #[arg(long, env = "EBB_ADVERTISE_URL", value_parser = parse_advertise_url)]
    pub advertise_url: Option<String>,
    /// On etcd: on SIGTERM, hand this server's runs to the others before stopping (a run
    /// whose program runs on this host is handed over once the program ends); a second
    /// signal stops at once.
    #[arg(long, env = "EBB_DRAIN")]
    pub drain: bool,
    /// The key that encrypts the secure store, created owner-only on first start. Keep it
    /// out of the store's backups (default: secure.key in the data dir).
    #[arg(long, env = "EBB_SECURE_KEY_FILE")]
    pub secure_key_file: Option<PathBuf>,
    /// How often the janitor sweeps the clouds for resources with ebb's tags that the store
    /// does not account for ("off" or 0 for never).
    #[arg(long, env = "EBB_JANITOR_INTERVAL", default_value = "10m", value_parser = parse_interval)]
    pub janitor_interval: Interval,
    /// Let scheduled sweeps delete what they find (else they only report it).
    #[arg(long, env = "EBB_JANITOR_DELETE")]
    pub janitor_delete: bool,
    /// Serve no tokens at all: every request is an instance admin's. Allowed only on a
    /// loopback address; anyone on this host can then use the API.
    #[arg(long, env = "EBB_NO_AUTH")]
    pub no_auth: bool,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "EBB_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM, owner-only) of --tls-cert.
    #[arg(long, env = "EBB_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an address other hosts can reach (behind a TLS proxy, say);
    /// otherwise such an address needs --tls-cert.
    #[arg(long, env = "EBB_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// From the global --token-file.
    #[arg(skip)]
    pub token_file: Option<PathBuf>,
    /// From the global --ca-cert.
    #[arg(skip)]
    pub ca_cert: Option<PathBuf>,
    #[arg(skip)]
    pub token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Copy an installation into another store (e.g. from redb to etcd), with every server of
    /// both stopped. A target that holds anything is refused unless --force; the counts of
    /// every table are compared at the end.
    Copy {
        /// The store to copy: `redb:DATA_DIR` or `etcd:URL[,URL...]`.
        #[arg(long, value_name = "STORE")]
        from: String,
        /// The store to copy into: `redb:DATA_DIR` or `etcd:URL[,URL...]`.
        #[arg(long, value_name = "STORE")]
        to: String,
        /// The installation's key prefix when --from is etcd.
        #[arg(long, default_value = "/ebb")]
        from_prefix: String,
        /// The installation's key prefix when --to is etcd.
        #[arg(long, default_value = "/ebb")]
        to_prefix: String,
        /// Replace whatever the target holds.
        #[arg(long)]
        force: bool,
        /// How to reach etcd, for whichever side is etcd.
        #[command(flatten)]
        etcd_access: EtcdAccessArgs,
    },
}

/// How a server reaches etcd securely: TLS, and etcd's own users or client certificates.
#[derive(Debug, Clone, Args)]
pub struct EtcdAccessArgs {
    /// The CA certificate (PEM) that signed etcd's certificates: with https:// endpoints.
    #[arg(long, env = "EBB_ETCD_CA_CERT", value_name = "FILE")]
    pub etcd_ca_cert: Option<PathBuf>,
    /// A client certificate (PEM), for an etcd that authenticates clients by certificate
    /// (started with --client-cert-auth); with --etcd-key.
    #[arg(long, env = "EBB_ETCD_CERT", value_name = "FILE")]
    pub etcd_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM), readable by its owner only.
    #[arg(long, env = "EBB_ETCD_KEY", value_name = "FILE")]
    pub etcd_key: Option<PathBuf>,
    /// An etcd user (etcd started with auth enabled); its password is read from
    /// --etcd-password-file, never given on the command line.
    #[arg(long, env = "EBB_ETCD_USER", value_name = "NAME")]
    pub etcd_user: Option<String>,
    /// A file holding the etcd user's password (its first line), readable by its owner only.
    #[arg(long, env = "EBB_ETCD_PASSWORD_FILE", value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
    /// Allow plain http:// to an etcd on another host (behind a network you trust).
    #[arg(long, env = "EBB_ETCD_INSECURE")]
    pub etcd_insecure: bool,
}

impl From<EtcdAccessArgs> for crate::store::etcd::Access {
    fn from(args: EtcdAccessArgs) -> Self {
        crate::store::etcd::Access {
            ca_cert: args.etcd_ca_cert,
            client_cert: args.etcd_cert,
            client_key: args.etcd_key,
            user: args.etcd_user,
            password_file: args.etcd_password_file,
            insecure: args.etcd_insecure,
        }
    }
}

/// A period, or none (`off`).
#[derive(Debug, Clone, Copy)]
pub struct Interval(pub Option<std::time::Duration>);

/// A duration such as `10m`, or `off`.
fn parse_interval(text: &str) -> Result<Interval, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(Interval(None));
    }
    ebb_spi::parse_duration(text).map(|d| Interval(Some(d)))
}

#[derive(Debug, Subcommand)]
pub enum ProvisionerCmd {
    /// List provisioners.
    List,
    /// Show a provisioner and its properties.
    Get { name: String },
}

/// Names a profile: `SYSTEM:name`, `USER:name` or `name` (USER, in `--namespace`).
#[derive(Debug, Clone, Args)]
pub struct ProfileTarget {
    /// Profile: SYSTEM:<name>, USER:<name>, or <name> (a USER profile).
    pub profile: String,
    /// Namespace of a USER profile.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
}

/// How to define a profile, from a file or from flags.
#[derive(Debug, Clone, Default, Args)]
pub struct ProfileFlags {
    /// JSON file with the profile body (as for PUT); flags given too override it.
    #[arg(long, short)]
    pub file: Option<PathBuf>,
    /// Provisioner name (see `ebb provisioner list`).
    #[arg(long)]
    pub provisioner: Option<String>,
    #[arg(long)]
    pub label: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    /// Editable property NAME=VALUE (runs may override it); repeat for more.
    #[arg(long = "property", value_name = "NAME=VALUE")]
    pub properties: Vec<String>,
    /// Fixed property NAME=VALUE (runs may not override it); repeat for more.
    #[arg(long = "fixed-property", value_name = "NAME=VALUE")]
    pub fixed_properties: Vec<String>,
    /// Remove a property; repeat for more.
    #[arg(long = "remove-property", value_name = "NAME")]
    pub remove_properties: Vec<String>,
    /// Keep the cluster this long after a failed run (e.g. 30m, 8h; 0 = tear down at once).
    #[arg(long, value_name = "DURATION")]
    pub keepalive_failed: Option<String>,
    /// Keep the cluster this long after a run stopped with keepalive.
    #[arg(long, value_name = "DURATION")]
    pub keepalive_killed: Option<String>,
    /// Longest a cluster may live (e.g. 4h).
    #[arg(long, value_name = "DURATION", conflicts_with = "no_timeout")]
    pub timeout: Option<String>,
    /// Remove the timeout: clusters may live as long as their run.
    #[arg(long)]
    pub no_timeout: bool,
    /// Whether a run that completes leaves its cluster IDLE for the next run that matches.
    #[arg(long, value_name = "BOOL")]
    pub cluster_reuse: Option<bool>,
    /// How long an IDLE cluster waits for its next run (e.g. 10m; default 30m).
    #[arg(long, value_name = "DURATION")]
    pub reuse_idle: Option<String>,
    /// What a node of its runs costs an hour, over the price table (hosts, local).
    #[arg(long, value_name = "PRICE")]
    pub price_per_node_hour: Option<f64>,
    /// Keep at least N clusters ready ahead of demand (a warm pool; needs --pool-max).
    #[arg(long, value_name = "N")]
    pub pool_min: Option<u32>,
    /// Keep at most N IDLE clusters in the pool.
    #[arg(long, value_name = "N")]
    pub pool_max: Option<u32>,
    /// How long a cluster a run left waits in the pool (e.g. 30m).
    #[arg(long, value_name = "DURATION")]
    pub pool_idle: Option<String>,
    /// Remove the pool.
    #[arg(long, conflicts_with_all = ["pool_min", "pool_max", "pool_idle"])]
    pub no_pool: bool,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCmd {
    /// List profiles: a namespace's, or the SYSTEM ones.
    List(#[command(flatten)] ScopedList),
    /// Show a profile.
    Get(#[command(flatten)] ProfileTarget),
    /// Show whether a profile is ENABLED or DISABLED.
    Status(#[command(flatten)] ProfileTarget),
    /// Create a profile (fails if it exists).
    Create {
        #[command(flatten)]
        target: ProfileTarget,
        #[command(flatten)]
        flags: ProfileFlags,
    },
    /// Change an existing profile.
    Edit {
        #[command(flatten)]
        target: ProfileTarget,
        #[command(flatten)]
        flags: ProfileFlags,
    },
    /// Delete a profile (it must be disabled and assigned nowhere).
    Delete(#[command(flatten)] ProfileTarget),
    /// Enable a profile.
    Enable(#[command(flatten)] ProfileTarget),
    /// Disable a profile.
    Disable(#[command(flatten)] ProfileTarget),
    /// Show how a profile has been used: runs by status, live nodes, node-hours.
    Usage(#[command(flatten)] ProfileTarget),
    /// Show every namespace, app and program where a profile is assigned.
    Assignments(#[command(flatten)] ProfileTarget),
    /// Show a profile's warm pool: its IDLE clusters, those being made, those runs hold.
    Pool(#[command(flatten)] ProfileTarget),
}

/// Which of a scoped entity (profiles, templates) to list.
#[derive(Debug, Clone, Args)]
pub struct ScopedList {
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// List the SYSTEM ones only.
    #[arg(long, conflicts_with = "include_system")]
    pub system: bool,
    /// Also list the SYSTEM ones.
    #[arg(long)]
    pub include_system: bool,
}

impl ScopedList {
    /// The API path that lists `kind` (`profiles`, `templates`).
    pub fn path(&self, kind: &str) -> String {
        if self.system {
            format!("/v3/{kind}")
        } else {
            format!(
                "/v3/namespaces/{}/{kind}?includeSystem={}",
                self.namespace, self.include_system
            )
        }
    }
}

/// Which preferences: the instance's, a namespace's, an app's or a program's.
#[derive(Debug, Clone, Args)]
pub struct PrefTarget {
    /// Namespace; without it, the instance-level preferences.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// App in the namespace.
    #[arg(long, requires = "namespace")]
    pub app: Option<String>,
    /// Program of the app.
    #[arg(long, requires = "app")]
    pub program: Option<String>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Template: SYSTEM:<name>, USER:<name>, or <name> (the namespace's, else SYSTEM).
    #[arg(long)]
    pub template: String,
    /// Provisioner the nodes are for.
    #[arg(long, default_value = "local")]
    pub provisioner: String,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// create, delete, start-services, stop-services or restart-services.
    #[arg(long, default_value = "create")]
    pub operation: String,
    /// Services of the cluster (default: the template's); repeat for more.
    #[arg(long = "service")]
    pub services: Vec<String>,
    /// start-, stop- or restart-services: only this service, with its dependent chains
    /// (repeatable; default: every service).
    #[arg(long = "select-service", value_name = "SERVICE")]
    pub select_services: Vec<String>,
    /// start-, stop- or restart-services: only on this node (repeatable; default: every node).
    #[arg(long = "select-node", value_name = "NODE")]
    pub select_nodes: Vec<String>,
    #[arg(long)]
    pub hardware_type: Option<String>,
    #[arg(long)]
    pub image_type: Option<String>,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Subcommand)]
pub enum TemplateCmd {
    /// List templates: a namespace's, or the SYSTEM ones.
    List(#[command(flatten)] ScopedList),
    /// Show a template: SYSTEM:<name>, USER:<name> or <name>.
    Get {
        template: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// Create or replace a template from a JSON file.
    Put {
        template: String,
        #[arg(long, short)]
        file: PathBuf,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// Delete a template.
    Delete {
        template: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AppCmd {
    /// Deploy (create or replace) an app from a JSON file.
    Deploy {
        /// The app spec: {"description", "config", "programs": [...]}.
        file: PathBuf,
        /// App name (default: the file name without its extension).
        #[arg(long)]
        name: Option<String>,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// List the apps of a namespace.
    List {
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// Show an app and its programs.
    Get {
        name: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// Delete an app (refused while one of its runs holds a cluster).
    Delete {
        name: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PrefCmd {
    /// Show preferences.
    Get {
        #[command(flatten)]
        target: PrefTarget,
        /// Merge in the levels above (the instance's, for a namespace).
        #[arg(long)]
        resolved: bool,
    },
    /// Set preferences KEY=VALUE (added to those set, unless --replace).
    Set {
        #[command(flatten)]
        target: PrefTarget,
        #[arg(value_name = "KEY=VALUE", required = true)]
        pairs: Vec<String>,
        /// Replace every preference at this level instead of adding.
        #[arg(long)]
        replace: bool,
    },
    /// Delete the given keys, or every preference at this level when none are given.
    Delete {
        #[command(flatten)]
        target: PrefTarget,
        #[arg(value_name = "KEY")]
        keys: Vec<String>,
    },
}

/// A lease's time to live: 2 s to 5 min (a shorter one expires on a busy machine's pauses).
fn parse_lease_ttl(s: &str) -> Result<std::time::Duration, String> {
    let ttl = humantime::parse_duration(s).map_err(|e| format!("'{s}': {e}"))?;
    if !(std::time::Duration::from_secs(2)..=std::time::Duration::from_secs(300)).contains(&ttl) {
        return Err(format!("'{s}' is out of range: give 2s to 5m"));
    }
    Ok(ttl)
}

/// An advertised URL: `http://` or `https://`, a host, no path; at most 256 characters.
fn parse_advertise_url(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(|| format!("'{s}' must start with http:// or https://"))?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') || s.len() > 256 || s.chars().any(char::is_whitespace)
    {
        return Err(format!(
            "'{s}' is not a server's URL: give http://HOST[:PORT], with no path"
        ));
    }
    Ok(s.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ttls_and_advertised_urls_are_bounded() {
        assert_eq!(
            parse_lease_ttl("10s"),
            Ok(std::time::Duration::from_secs(10))
        );
        for bad in ["1s", "6m", "ten"] {
            assert!(parse_lease_ttl(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_advertise_url("http://10.0.0.1:11015/"),
            Ok("http://10.0.0.1:11015".to_string())
        );
        assert!(parse_advertise_url("https://ebb.example").is_ok());
        let long = format!("http://{}", "a".repeat(300));
        for bad in [
            "10.0.0.1:11015",
            "http://",
            "http://h/v3",
            "http://h x",
            long.as_str(),
        ] {
            assert!(parse_advertise_url(bad).is_err(), "{bad}");
        }
    }
}

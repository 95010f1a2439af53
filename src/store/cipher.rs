//! The installation's key: the key file every server of an installation shares, and what
//! it does: seal secure keys (XChaCha20-Poly1305, with the key's `<namespace>/<name>` as
//! associated data, so a sealed value cannot be moved to another name), sign what must be
//! the installation's own (the store's records, `store::seal`; run tokens), and keep the
//! highest access generation this server has seen. It reads no store: the store's layers
//! below (transactions, seals) use it.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};

use crate::model::access::TokenRecord;

/// What token records of schema version 2 were signed under.
const TOKEN_SEAL: &str = "token";

/// What every run token begins with: a run's program gets one as `EBB_RUN_TOKEN`, to resize
/// its own cluster (`ebbrun_<namespace>.<run>.<signature>`).
pub const RUN_TOKEN_PREFIX: &str = "ebbrun_";

/// What run token signatures are made under.
const RUN_TOKEN_SEAL: &str = "run-token";
const CLUSTER_SECRET_SEAL: &str = "cluster-secret";

/// The contents of `path`, a file that holds a secret (a key, a token, a password), at most
/// `max` bytes: refused when anyone but its owner may read it, as the secure store's key is.
/// The error says what is wrong, for the caller to put after the option that named the file.
pub fn read_owner_only(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mode = file
        .metadata()
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "others can read it (mode {:o}); chmod 600 it",
            mode & 0o777
        ));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("larger than {max} bytes"));
    }
    Ok(bytes)
}

/// Why the server key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read the secure store key {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the secure store key {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the secure store key {path} is readable by others (mode {mode:o}); make it owner-only with chmod 600"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("the secure store key {path} is not 64 hex digits; restore it from a backup")]
    Malformed { path: PathBuf },
    #[error(
        "{path}, the highest access generation this server saw, is not a number; restore it, or remove it if this server never served"
    )]
    Generation { path: PathBuf },
    #[error("cannot draw random bytes: {0}")]
    Random(String),
}

/// The server key that seals secure keys, and seals the store's records (`store::seal`) so
/// that one written into the store by anyone but a server of the installation decides
/// nothing. Its `Debug` shows nothing of it.
///
/// It also keeps the highest access generation this server has seen (see
/// `service::tokens::generation`), in memory and in a file of its data dir: a store whose
/// generation goes back (token and session records written back as they were before a
/// revocation) is caught by every server that saw the later one.
pub struct Cipher {
    aead: XChaCha20Poly1305,
    /// The key of [`Cipher::sign`], derived from the key file's: never the same key for two
    /// uses.
    signing: [u8; 32],
    /// The highest access generation seen.
    generation_seen: std::sync::atomic::AtomicU64,
    /// Where [`Cipher::generation_seen`] is kept across restarts, once set; its lock orders
    /// the writes of the file.
    generation_file: std::sync::Mutex<Option<PathBuf>>,
}

type Hmac = hmac::Hmac<sha2::Sha256>;

/// What the signing key is derived under.
const SIGNING_LABEL: &[u8] = b"ebb: records that grant access";

/// `key` keyed over `label` (then a NUL) and `data`.
fn keyed(key: &[u8], label: &[u8], data: &[u8]) -> Hmac {
    use hmac::Mac as _;
    let mut mac = <Hmac as hmac::KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(label);
    mac.update(&[0]);
    mac.update(data);
    mac
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher(..)")
    }
}

fn random<const N: usize>() -> Result<[u8; N], KeyFileError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| KeyFileError::Random(e.to_string()))?;
    Ok(bytes)
}

impl Cipher {
    /// Reads the key at `path`, creating it (owner-only) if there is none. A key others can
    /// read is refused, as ssh refuses such a private key.
    pub fn load_or_create(path: &Path) -> Result<Cipher, KeyFileError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => {
                let mode = std::fs::metadata(path)
                    .map_err(|source| KeyFileError::Read {
                        path: path.into(),
                        source,
                    })?
                    .permissions()
                    .mode();
                if mode & 0o077 != 0 {
                    return Err(KeyFileError::Exposed {
                        path: path.into(),
                        mode: mode & 0o777,
                    });
                }
                text
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_key(path)?,
            Err(source) => {
                return Err(KeyFileError::Read {
                    path: path.into(),
                    source,
                });
            }
        };
        let key = from_hex(text.trim())
            .filter(|k| k.len() == 32)
            .ok_or_else(|| KeyFileError::Malformed { path: path.into() })?;
        let aead = XChaCha20Poly1305::new_from_slice(&key)
            .map_err(|_| KeyFileError::Malformed { path: path.into() })?;
        Ok(Cipher::from_key(aead, &key))
    }

    fn from_key(aead: XChaCha20Poly1305, key: &[u8]) -> Cipher {
        use hmac::Mac as _;
        let signing = keyed(key, SIGNING_LABEL, &[])
            .finalize()
            .into_bytes()
            .into();
        Cipher {
            aead,
            signing,
            generation_seen: std::sync::atomic::AtomicU64::new(0),
            generation_file: std::sync::Mutex::new(None),
        }
    }

    /// Whether this installation signed token `record` of a schema 2 store as it is.
    pub fn legacy_token_is_genuine(&self, record: &TokenRecord) -> bool {
        self.verify(TOKEN_SEAL, &record.signed(), &record.signature)
    }

    /// Keeps the highest access generation seen in `path` (owner-only), starting from what
    /// it holds. Called once, at start-up; a file that cannot be read is an error, not a
    /// fresh start.
    pub fn keep_generation_in(&self, path: &Path) -> Result<(), KeyFileError> {
        let held = match std::fs::read_to_string(path) {
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .map_err(|_| KeyFileError::Generation { path: path.into() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(source) => {
                return Err(KeyFileError::Read {
                    path: path.into(),
                    source,
                });
            }
        };
        self.generation_seen
            .fetch_max(held, std::sync::atomic::Ordering::SeqCst);
        *self
            .generation_file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(path.to_path_buf());
        Ok(())
    }

    /// Whether access generation `found`, read from the store, is at least the highest this
    /// server has seen; a higher one becomes the highest (and is written to the generation
    /// file, if one is kept).
    pub fn generation_holds(&self, found: u64) -> bool {
        use std::sync::atomic::Ordering;
        let before = self.generation_seen.fetch_max(found, Ordering::SeqCst);
        if found < before {
            return false;
        }
        if found > before {
            let file = self
                .generation_file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(path) = file.as_ref() {
                // The highest now, written under the lock: a later write never lowers it.
                let highest = self.generation_seen.load(Ordering::SeqCst);
                if let Err(e) = write_owner_only(path, &format!("{highest}\n")) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot keep the access generation seen");
                }
            }
        }
        true
    }

    /// The signature of `data` as a record of kind `label` (`token`, `session`): hex.
    pub fn sign(&self, label: &str, data: &[u8]) -> String {
        use hmac::Mac as _;
        to_hex(
            &keyed(&self.signing, label.as_bytes(), data)
                .finalize()
                .into_bytes(),
        )
    }

    /// Whether `signature` is this installation's for `data` as a record of kind `label`,
    /// compared in constant time.
    pub fn verify(&self, label: &str, data: &[u8], signature: &str) -> bool {
        use hmac::Mac as _;
        from_hex(signature).is_some_and(|tag| {
            keyed(&self.signing, label.as_bytes(), data)
                .verify_slice(&tag)
                .is_ok()
        })
    }

    /// The run token of run `run` of namespace `namespace` ([`RUN_TOKEN_PREFIX`]).
    /// The secret of cluster `cluster` its service scripts share (64 hex digits): made from
    /// this installation's key, so every server gives the same, and kept nowhere.
    pub fn cluster_secret(&self, cluster: &str) -> String {
        self.sign(CLUSTER_SECRET_SEAL, cluster.as_bytes())
    }

    pub fn run_token(&self, namespace: &str, run: &str) -> String {
        let signature = self.sign(RUN_TOKEN_SEAL, format!("{namespace}/{run}").as_bytes());
        format!("{RUN_TOKEN_PREFIX}{namespace}.{run}.{signature}")
    }

    /// The namespace and run a run token names, if this installation made it.
    pub fn run_token_names(&self, value: &str) -> Option<(String, String)> {
        let rest = value
            .strip_prefix(RUN_TOKEN_PREFIX)
            .filter(|r| r.len() <= 256)?;
        let mut parts = rest.split('.');
        let (namespace, run, signature) = (parts.next()?, parts.next()?, parts.next()?);
        let plain = |s: &str, more: &[u8]| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || more.contains(&b))
        };
        if parts.next().is_some() || !plain(namespace, b"_-") || !plain(run, b"-") {
            return None;
        }
        self.verify(
            RUN_TOKEN_SEAL,
            format!("{namespace}/{run}").as_bytes(),
            signature,
        )
        .then(|| (namespace.to_string(), run.to_string()))
    }

    /// A cipher with a random key, for tests.
    #[cfg(test)]
    pub fn ephemeral() -> Cipher {
        let key = random::<32>().expect("random bytes");
        let aead = XChaCha20Poly1305::new_from_slice(&key).expect("32-byte key");
        Cipher::from_key(aead, &key)
    }

    /// Seals `plain` under `label` (the key's `<namespace>/<name>`); the error says why not.
    pub fn seal(&self, label: &str, plain: &[u8]) -> Result<Sealed, String> {
        let nonce = random::<24>().map_err(|e| e.to_string())?;
        let data = self
            .aead
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: label.as_bytes(),
                },
            )
            .map_err(|_| "cannot seal a secure key".to_string())?;
        Ok(Sealed {
            nonce: to_hex(&nonce),
            data: to_hex(&data),
        })
    }

    /// The plain value of `sealed` under `label`, if this cipher sealed it there.
    pub fn open(&self, label: &str, sealed: &Sealed) -> Option<String> {
        let nonce = from_hex(&sealed.nonce).filter(|n| n.len() == 24)?;
        let data = from_hex(&sealed.data)?;
        let plain = self
            .aead
            .decrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &data,
                    aad: label.as_bytes(),
                },
            )
            .ok()?;
        String::from_utf8(plain).ok()
    }
}

/// Writes `text` to `path` owner-only, through a temporary file renamed into place.
fn write_owner_only(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Writes a new random key owner-only, without ever leaving it readable by others.
fn create_key(path: &Path) -> Result<String, KeyFileError> {
    let failed = |source| KeyFileError::Create {
        path: path.into(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let text = format!("{}\n", to_hex(&random::<32>()?));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    tracing::info!(path = %path.display(), "created the secure store key");
    Ok(text)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A sealed value: nonce and ciphertext, hex.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sealed {
    pub nonce: String,
    pub data: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_token_names_its_run_only_when_this_installation_made_it() {
        let cipher = Cipher::ephemeral();
        let token = cipher.run_token("team-a", "0190-ab");
        assert!(token.starts_with("ebbrun_team-a.0190-ab."), "{token}");
        assert_eq!(
            cipher.run_token_names(&token),
            Some(("team-a".to_string(), "0190-ab".to_string()))
        );
        // Another run's name under this signature, another installation, a mangled token:
        // nothing.
        let names = |t: &str| cipher.run_token_names(t);
        assert_eq!(names(&token.replace("0190-ab", "0190-ac")), None);
        assert_eq!(Cipher::ephemeral().run_token_names(&token), None);
        assert_eq!(names(&format!("{token}.x")), None);
        assert_eq!(names("ebbrun_team-a.0190-ab"), None);
        assert_eq!(names(&token.replace("team-a", "team/a")), None);
    }

    #[test]
    fn sealed_values_open_only_under_their_own_name_and_key() {
        let cipher = Cipher::ephemeral();
        let sealed = cipher.seal("default/k", b"s3cr3t").expect("seal");
        assert!(!sealed.data.contains(&to_hex(b"s3cr3t")));
        assert_eq!(cipher.open("default/k", &sealed).as_deref(), Some("s3cr3t"));
        assert_eq!(cipher.open("default/other", &sealed), None);
        assert_eq!(Cipher::ephemeral().open("default/k", &sealed), None);
    }

    #[test]
    fn signatures_hold_only_for_their_data_kind_and_key() {
        let cipher = Cipher::ephemeral();
        let signed = cipher.sign("token", b"admin");
        assert_eq!(signed.len(), 64);
        assert!(cipher.verify("token", b"admin", &signed));
        assert!(!cipher.verify("token", b"admin2", &signed));
        assert!(!cipher.verify("session", b"admin", &signed));
        assert!(!cipher.verify("token", b"admin", &signed[..62]));
        assert!(!cipher.verify("token", b"admin", "not hex"));
        assert!(!Cipher::ephemeral().verify("token", b"admin", &signed));
    }

    #[test]
    fn the_highest_access_generation_seen_holds_across_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("access.generation");
        let cipher = Cipher::ephemeral();
        cipher.keep_generation_in(&file).expect("no file yet");
        assert!(cipher.generation_holds(0));
        assert!(cipher.generation_holds(3));
        assert!(!cipher.generation_holds(2), "a generation set back");
        let mode = std::fs::metadata(&file).expect("kept").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Another start of the server reads what the last one saw.
        let again = Cipher::ephemeral();
        again.keep_generation_in(&file).expect("read");
        assert!(!again.generation_holds(2));
        assert!(again.generation_holds(3));
        std::fs::write(&file, "three").expect("write");
        assert!(matches!(
            Cipher::ephemeral().keep_generation_in(&file),
            Err(KeyFileError::Generation { .. })
        ));
    }

    #[test]
    fn the_key_file_is_created_owner_only_and_refused_when_exposed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("keys").join("secure.key");
        let first = Cipher::load_or_create(&path).expect("created");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let sealed = first.seal("ns/k", b"v").expect("seal");
        let again = Cipher::load_or_create(&path).expect("loaded");
        assert_eq!(again.open("ns/k", &sealed).as_deref(), Some("v"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = Cipher::load_or_create(&path).expect_err("exposed");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::write(&path, "not hex").expect("write");
        assert!(matches!(
            Cipher::load_or_create(&path),
            Err(KeyFileError::Malformed { .. })
        ));
    }
}

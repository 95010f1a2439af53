//! HTTPS: the server's rustls configuration from the PEM files `--tls-cert` and `--tls-key`
//! name, checked at start so a bad file stops the server before it listens.

use std::path::Path;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS configuration of a server with the certificate chain in `cert` and its private key
/// in `key` (PEM). The key file must be owner-only, as the secure store's key is.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert {}: holds no certificate",
            cert.display()
        ));
    }
    let private = crate::store::secure::read_owner_only(key, 1 << 20)
        .and_then(|pem| PrivateKeyDer::from_pem_slice(&pem).map_err(|e| e.to_string()))
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(chain, private)
    .map_err(|e| format!("--tls-cert/--tls-key: {e}"))
}

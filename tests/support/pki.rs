//! Certificates made at test time: a CA, a certificate for 127.0.0.1 and `localhost` it
//! signed (a server's), and client certificates it signed, as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// A CA, and a server certificate and key it signed, in one directory.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
}

impl Pki {
    /// A new CA in `dir` (`ca.pem`) and a server certificate for 127.0.0.1 and `localhost`
    /// (`cert.pem`, `key.pem`, the key readable by its owner only).
    pub fn new(dir: &Path) -> Pki {
        Pki::for_addresses(dir, &[])
    }

    /// [`Pki::new`], the server certificate also for `more` addresses.
    pub fn for_addresses(dir: &Path, more: &[String]) -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "ebb test CA");
        let issuer = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key"))
            .expect("ca");
        let key = KeyPair::generate().expect("key");
        let names = ["localhost".to_string(), "127.0.0.1".to_string()]
            .into_iter()
            .chain(more.iter().cloned())
            .collect::<Vec<_>>();
        let mut params = CertificateParams::new(names).expect("params");
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &issuer).expect("cert");
        let pki = Pki {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            issuer,
            dir: dir.to_path_buf(),
        };
        std::fs::write(&pki.ca, pki.issuer.pem()).expect("ca.pem");
        std::fs::write(&pki.cert, cert.pem()).expect("cert.pem");
        private(&pki.key, &key.serialize_pem());
        pki
    }

    /// A client certificate for `name` (its common name) and its key, signed by the CA:
    /// `<name>.pem` and `<name>-key.pem`.
    pub fn client(&self, name: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer).expect("client cert");
        let (cert_path, key_path) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}-key.pem")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("client cert");
        private(&key_path, &key.serialize_pem());
        (cert_path, key_path)
    }
}

/// Writes `text` to `path`, readable by its owner only.
pub fn private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

//! The webhook's self-signed bootstrap: a private CA and a serving certificate it signs, for
//! `devinject-webhook certs` (docs/prepare.md has the steps). The apiserver trusts the CA
//! through the webhook configuration's `caBundle`; nothing else does.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// Why certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A name is not usable in a certificate.
    #[error("cannot make a certificate for {names:?}: {source}")]
    Generate {
        /// The names asked for.
        names: Vec<String>,
        /// The library's error.
        source: rcgen::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The bootstrap's output, PEM-encoded.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The CA's certificate (the webhook configuration's `caBundle`, base64-encoded).
    pub ca_cert: String,
    /// The serving certificate.
    pub cert: String,
    /// The serving certificate's private key.
    pub key: String,
}

/// The DNS names the apiserver uses for `service` in `namespace`; it connects to
/// `<service>.<namespace>.svc`.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A fresh CA and a serving certificate for `names` (DNS names or IP addresses) signed by it.
pub fn generate(names: &[String]) -> Result<Bundle, CertsError> {
    let err = |source| CertsError::Generate {
        names: names.to_vec(),
        source,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "devinject-webhook CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(err)?).map_err(err)?;
    let mut serving = CertificateParams::new(names.to_vec()).map_err(err)?;
    serving.distinguished_name.push(
        DnType::CommonName,
        names.first().map_or("devinject-webhook", |n| n.as_str()),
    );
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(err)?;
    let cert = serving.signed_by(&key, &ca).map_err(err)?;
    Ok(Bundle {
        ca_cert: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

impl Bundle {
    /// Writes `ca.crt`, `tls.crt` and `tls.key` (mode 0600) into `dir`, made if missing.
    pub fn write(&self, dir: &Path) -> Result<(), CertsError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let werr = |path: &Path| {
            let path = path.to_owned();
            move |source| CertsError::Write { path, source }
        };
        std::fs::create_dir_all(dir).map_err(werr(dir))?;
        for (name, text, mode) in [
            ("ca.crt", &self.ca_cert, 0o644),
            ("tls.crt", &self.cert, 0o644),
            ("tls.key", &self.key, 0o600),
        ] {
            let path = dir.join(name);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(mode)
                .open(&path)
                .map_err(werr(&path))?;
            f.write_all(text.as_bytes()).map_err(werr(&path))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serving_certificate_signed_by_its_own_ca() {
        let names = [service_names("hook", "ns"), vec!["127.0.0.1".into()]].concat();
        let b = generate(&names).unwrap();
        assert!(b.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(b.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(b.key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(b.ca_cert, b.cert);
        // rustls accepts the pair as a server identity.
        crate::server::tls_config(b.cert.as_bytes(), b.key.as_bytes()).unwrap();
        let t = tempfile::tempdir().unwrap();
        b.write(&t.path().join("out")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(t.path().join("out/tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

//! The test cluster's certificates, made with the `openssl` command: a CA, the apiserver's
//! serving certificate for `127.0.0.1` and `localhost` (and the `kubernetes` service address),
//! one client certificate in `system:masters` that every component and `kubectl` use, and the
//! service-account signing key. Short-lived, in the cluster's temp dir.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::daemons::run_ok;

/// The files [`make`] writes.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The apiserver's serving certificate and key.
    pub server_cert: PathBuf,
    /// See `server_cert`.
    pub server_key: PathBuf,
    /// The client certificate (CN `devinject-test-admin`, O `system:masters`) and key.
    pub admin_cert: PathBuf,
    /// See `admin_cert`.
    pub admin_key: PathBuf,
    /// The service-account signing key (RSA, PEM).
    pub service_account_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("openssl");
    cmd.current_dir(dir).args(args);
    run_ok(cmd)
        .map(|_| ())
        .with_context(|| format!("openssl {args:?} (apt-get install openssl)"))
}

/// A key and a certificate for `subject` signed by the CA in `dir`, with `extensions` (an
/// OpenSSL extension section's lines).
fn signed(dir: &Path, name: &str, subject: &str, extensions: &str) -> Result<()> {
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), extensions).context("write the extension file")?;
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            subject,
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.crt"),
            "-extfile",
            &ext,
        ],
    )
}

/// Makes the cluster's certificates and keys in `dir`.
pub fn make(dir: &Path) -> Result<Pki> {
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=devinject-test-ca",
        ],
    )?;
    signed(
        dir,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n\
         subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n",
    )?;
    signed(
        dir,
        "admin",
        "/O=system:masters/CN=devinject-test-admin",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=clientAuth\n",
    )?;
    openssl(dir, &["genrsa", "-out", "sa.key", "2048"])?;
    Ok(Pki {
        ca: dir.join("ca.crt"),
        server_cert: dir.join("apiserver.crt"),
        server_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        service_account_key: dir.join("sa.key"),
    })
}

/// A kubeconfig for `server` with the admin identity.
pub fn kubeconfig(pki: &Pki, server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {cert}\n    \
         client-key: {key}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n\
         current-context: test\n",
        ca = pki.ca.display(),
        cert = pki.admin_cert.display(),
        key = pki.admin_key.display(),
    )
}

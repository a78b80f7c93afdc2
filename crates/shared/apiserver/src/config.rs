//! The API server's configuration: from `--kubeconfig`, else the pod's service account, made
//! before a component chroots into the host's `/`.
//!
//! In its DaemonSet pod the DRA driver chroots into the host root (`--host-root`), so that every
//! path it reads, writes, executes or hands the runtime is the host's. The pod's service
//! account token lives in the pod's own filesystem, which the chroot leaves behind, and the
//! kubelet rotates it (a projected token lasts an hour): the client must read it again after
//! the chroot. [`ApiConfig::load`] therefore opens the token's directory before the chroot
//! and points the client at the token through that descriptor (`/proc/self/fd/<n>/token`),
//! which stays the pod's directory whatever the root is, and sees each rotation (the kubelet
//! swaps the directory's `..data` link; the descriptor holds the directory, not a file).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use devinject_devices::Excerpt;
use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

/// Makes ring the process's TLS provider, as the webhook's server names it, before any client
/// is made. rustls chooses a provider by itself only when one is linked: a build whose features
/// also bring aws-lc-rs (the workspace's tests do, through the CDI crate's schema validator)
/// would otherwise stop at the first client with a panic. Idempotent: a provider already
/// installed stays.
pub fn install_tls_provider() {
    // An Err means a provider is installed already: the process's choice stands.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Where a pod's service account credentials are mounted (the token, `ca.crt`, `namespace`).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why the API server's configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ApiClientError {
    /// The kubeconfig given cannot be read or used.
    #[error("kubeconfig {}: {message}; pass a readable kubeconfig with --kubeconfig, or none in a pod", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What kube-rs said.
        message: String,
    },
    /// Not in a pod, or the pod has no service account token.
    #[error("no API server credentials: not in a pod with a service account token ({message}), and no --kubeconfig given; mount the token (the manifests' projected volume) or pass --kubeconfig")]
    InCluster {
        /// What kube-rs said.
        message: String,
    },
    /// An API server reached over plain HTTP beyond this host: the service account token would
    /// cross the network in clear.
    #[error("API server {url} is plain http:// to a host that is not loopback: its credentials (the service account token) would cross the network in clear; use https:// and the API server's secure port in the kubeconfig")]
    PlainHttp {
        /// The server URL, bounded and escaped.
        url: String,
    },
    /// The token's directory cannot be held open for use after the chroot.
    #[error("cannot open the service account directory {SERVICE_ACCOUNT_DIR} to keep its token readable after the chroot: {source}")]
    TokenDir {
        /// The error of open(2).
        source: nix::Error,
    },
}

/// A client configuration, and what it needs kept open.
#[derive(Debug)]
pub struct ApiConfig {
    /// The configuration for [`kube::Client::try_from`].
    pub config: kube::Config,
    /// The service account directory the token is read through, held for the process's life
    /// when the configuration is in-cluster and a chroot follows.
    pub token_dir: Option<OwnedFd>,
}

impl ApiConfig {
    /// The configuration from `kubeconfig`, else the pod's service account. With
    /// `chroot_follows`, an in-cluster token is read through a descriptor of its directory (see
    /// the module's documentation); a kubeconfig is read whole here, before the chroot.
    pub async fn load(
        kubeconfig: Option<&Path>,
        chroot_follows: bool,
    ) -> Result<Self, ApiClientError> {
        if let Some(path) = kubeconfig {
            let kubeconfig_error = |e: &dyn std::fmt::Display| ApiClientError::Kubeconfig {
                path: path.to_owned(),
                message: e.to_string(),
            };
            let file =
                kube::config::Kubeconfig::read_from(path).map_err(|e| kubeconfig_error(&e))?;
            let config = kube::Config::from_custom_kubeconfig(
                file,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| kubeconfig_error(&e))?;
            check_transport(&config.cluster_url)?;
            return Ok(Self {
                config,
                token_dir: None,
            });
        }
        let mut config = kube::Config::incluster().map_err(|e| ApiClientError::InCluster {
            message: e.to_string(),
        })?;
        check_transport(&config.cluster_url)?;
        if !chroot_follows {
            return Ok(Self {
                config,
                token_dir: None,
            });
        }
        let dir = open(
            SERVICE_ACCOUNT_DIR,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|source| ApiClientError::TokenDir { source })?;
        config.auth_info.token_file = Some(token_through(&dir));
        Ok(Self {
            config,
            token_dir: Some(dir),
        })
    }
}

/// Refuses `http://` to anything but a loopback address (`localhost`, 127.0.0.0/8, `::1`):
/// plain HTTP is only safe where the bytes never leave the host.
pub fn check_transport(url: &http::Uri) -> Result<(), ApiClientError> {
    if url
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("https"))
    {
        return Ok(());
    }
    let host = url.host().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if url
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("http"))
        && !loopback
    {
        return Err(ApiClientError::PlainHttp {
            url: Excerpt(&url.to_string()).to_string(),
        });
    }
    Ok(())
}

/// The token's path through the held directory: the same file before and after a chroot, as
/// long as a procfs is mounted at `/proc` in the new root (the host's is).
fn token_through(dir: &OwnedFd) -> String {
    devinject_hostfs::path_fd::proc_path(dir)
        .join("token")
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_through_the_held_directory_even_after_it_is_renamed() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("serviceaccount");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("token"), "first").unwrap();
        let fd = open(&dir, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        let path = token_through(&fd);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "first");
        // The path the client knows no longer leads there: the descriptor still does, and sees
        // the kubelet's rotation.
        std::fs::rename(&dir, t.path().join("moved")).unwrap();
        std::fs::write(t.path().join("moved/token"), "rotated").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "rotated");
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_names_the_file_and_the_fix() {
        let e = ApiConfig::load(Some(Path::new("/nonexistent/kubeconfig")), false)
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("/nonexistent/kubeconfig") && text.contains("--kubeconfig"),
            "{text}"
        );
    }

    #[test]
    fn plain_http_is_refused_beyond_loopback() {
        for ok in [
            "https://10.0.0.1:6443",
            "HTTPS://api.example.com",
            "http://127.0.0.1:8080",
            "http://127.9.9.9:8080",
            "http://localhost:8080",
            "http://[::1]:8080",
        ] {
            assert!(check_transport(&ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.1:6443",
            "http://api.example.com",
            "HTTP://192.168.1.2",
            "http://[fd00::1]:8080",
            "http://localhost.example.com",
        ] {
            let err = check_transport(&bad.parse().unwrap()).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("plain http://") && text.contains("use https://"),
                "{text}"
            );
        }
        let err = check_transport(&"http://10.0.0.1:6443".parse().unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "API server http://10.0.0.1:6443/ is plain http:// to a host that is not loopback: \
             its credentials (the service account token) would cross the network in clear; use \
             https:// and the API server's secure port in the kubeconfig"
        );
    }

    #[tokio::test]
    async fn a_kubeconfig_naming_plain_http_is_refused_with_its_url() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://192.0.2.7:8080\n\
             users:\n- name: u\n  user:\n    token: secret\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
             current-context: x\n",
        )
        .unwrap();
        let err = ApiConfig::load(Some(&path), false).await.unwrap_err();
        assert!(matches!(err, ApiClientError::PlainHttp { .. }), "{err}");
        assert!(err.to_string().contains("http://192.0.2.7:8080"), "{err}");
        std::fs::write(
            &path,
            std::fs::read_to_string(&path)
                .unwrap()
                .replace("http://192.0.2.7:8080", "http://127.0.0.1:8080"),
        )
        .unwrap();
        ApiConfig::load(Some(&path), false).await.unwrap();
    }
}

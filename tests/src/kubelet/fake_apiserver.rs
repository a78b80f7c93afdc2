//! A stand-in for the API server, as much of it as the DRA driver run as a process needs on a
//! node without a cluster: every collection lists empty, every watch is held open without an
//! event, a server-side apply is answered with the object applied (what the API server stores
//! when no other field manager owns a field) and recorded for the test, anything else is 404.
//! Plain HTTP/1.1 on loopback, which the driver's client accepts there.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use super::within;

/// One server-side apply the stand-in answered.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The request path, query included.
    pub path: String,
    /// The object applied.
    pub object: Value,
}

/// A running stand-in; stopped (its connections closed) on drop.
pub struct FakeApiServer {
    url: String,
    applied: Arc<Mutex<Vec<Applied>>>,
    changed: Arc<Notify>,
    task: JoinHandle<()>,
}

impl FakeApiServer {
    /// Listens on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the stand-in API server");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let applied: Arc<Mutex<Vec<Applied>>> = Arc::default();
        let changed: Arc<Notify> = Arc::default();
        let task = tokio::spawn({
            let (applied, changed) = (Arc::clone(&applied), Arc::clone(&changed));
            async move {
                // Dropped with the task: every connection ends with the server.
                let mut connections = JoinSet::new();
                while let Ok((conn, _)) = listener.accept().await {
                    connections.spawn(serve(conn, Arc::clone(&applied), Arc::clone(&changed)));
                }
            }
        });
        Self {
            url,
            applied,
            changed,
            task,
        }
    }

    /// Writes a kubeconfig naming this server into `dir`; returns its path.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n\
                 users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    \
                 cluster: c\n    user: u\ncurrent-context: x\n",
                self.url
            ),
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// Every apply answered so far, oldest first.
    pub fn applied(&self) -> Vec<Applied> {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits for an apply after the first `after` whose object satisfies `done`, and returns it.
    pub async fn wait_applied(
        &self,
        limit: Duration,
        what: &str,
        after: usize,
        done: impl Fn(&Value) -> bool,
    ) -> Applied {
        within(limit, what, async {
            loop {
                // Registered before the check, so an apply between the two is not missed.
                let changed = self.changed.notified();
                if let Some(found) = self
                    .applied()
                    .into_iter()
                    .skip(after)
                    .find(|a| done(&a.object))
                {
                    return found;
                }
                changed.await;
            }
        })
        .await
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers the requests of one connection until the client closes it.
async fn serve(mut conn: TcpStream, applied: Arc<Mutex<Vec<Applied>>>, changed: Arc<Notify>) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        while buf.len() < end + 4 + length {
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buf.drain(..end + 4 + length).skip(end + 4).collect();
        let mut words = head.split(' ');
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let query = path.split_once('?').map_or("", |(_, q)| q);
        let watch = query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let (status, answer) = match method {
            "GET" if watch => {
                // Headers now, events never: the watch stays open, as on a quiet cluster.
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                            Transfer-Encoding: chunked\r\n\r\n";
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                return std::future::pending().await;
            }
            "GET" if is_collection(path) => (
                "200 OK",
                json!({"apiVersion": "v1", "kind": "List",
                    "metadata": {"resourceVersion": "1"}, "items": []}),
            ),
            "PATCH" => match serde_json::from_slice::<Value>(&body) {
                Ok(object) => {
                    applied
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Applied {
                            path: path.to_owned(),
                            object: object.clone(),
                        });
                    changed.notify_waiters();
                    ("200 OK", object)
                }
                Err(e) => (
                    "400 Bad Request",
                    status_object(400, "BadRequest", &format!("not JSON: {e}")),
                ),
            },
            _ => (
                "404 Not Found",
                status_object(404, "NotFound", &format!("{method} {path}")),
            ),
        };
        let text = answer.to_string();
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if conn.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// True for a path naming a collection (`.../resourceslices`), not one object in it.
fn is_collection(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/<plural>, /apis/<group>/<version>/<plural>, and the namespaced forms.
    let rest = match segments.first() {
        Some(&"api") => &segments[2.min(segments.len())..],
        Some(&"apis") => &segments[3.min(segments.len())..],
        _ => return false,
    };
    matches!(rest, [_] | ["namespaces", _, _])
}

/// A `Status` object as the API server answers an error.
fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "code": code, "message": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_and_objects() {
        assert!(is_collection(
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=x"
        ));
        assert!(is_collection("/api/v1/namespaces/default/events"));
        assert!(!is_collection(
            "/apis/resource.k8s.io/v1/resourceslices/node-a-demo"
        ));
        assert!(!is_collection(
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c"
        ));
        assert!(!is_collection("/version"));
    }
}

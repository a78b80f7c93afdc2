//! The connections a server in this process holds, TCP or Unix, as the kernel lists them: for
//! tests that check a server's descriptors stay within its cap while clients in the same process
//! (and other tests, run on threads beside) open and close their own.

use std::collections::HashSet;
use std::path::Path;

/// How many of this process's descriptors are TCP connections whose local port is `port` (the
/// accepted side of a server on `port`), its listening socket left out. Connections still in
/// the kernel's backlog hold no descriptor and are not counted; a descriptor duplicated counts
/// twice, as it costs twice.
///
/// Read from `/proc/self/fd` (each socket's inode) and `/proc/net/tcp` and `tcp6` (each
/// connection's local port, state and inode; proc(5)). A connection that ends while they are
/// read may be counted or not.
pub fn held_on_port(port: u16) -> usize {
    held(&connections_on_port(port))
}

/// How many of this process's descriptors are Unix stream connections accepted on the socket
/// bound at `path` (the kernel names them with their listener's path; a client's end is
/// unnamed), the listening socket left out. As for [`held_on_port`], connections in the backlog
/// are not counted and a duplicated descriptor counts twice.
///
/// Read from `/proc/self/fd` and `/proc/net/unix` (proc(5)); a path holding runs of spaces is
/// not told apart from one with single spaces.
pub fn held_at_path(path: &Path) -> usize {
    let path = path.to_string_lossy();
    let ours = std::fs::read_to_string("/proc/net/unix")
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| connection_at_path(line, &path))
                .collect()
        })
        .unwrap_or_default();
    held(&ours)
}

/// How many of this process's descriptors are sockets with an inode in `ours`.
fn held(ours: &HashSet<u64>) -> usize {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| socket_inode(&target.to_string_lossy()))
        .filter(|inode| ours.contains(inode))
        .count()
}

/// `socket:[12345]` → 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The inodes of the TCP sockets with local port `port` that are not listening.
fn connections_on_port(port: u16) -> HashSet<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| connection_on_port(line, port))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The inode of one line of `/proc/net/tcp` when its local port is `port` and it is not a
/// listening socket (state `0A`).
fn connection_on_port(line: &str, port: u16) -> Option<u64> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local_port = fields.get(1)?.rsplit(':').next()?;
    let local_port = u16::from_str_radix(local_port, 16).ok()?;
    let state = *fields.get(3)?;
    let inode = fields.get(9)?.parse().ok()?;
    (local_port == port && state != "0A" && inode != 0).then_some(inode)
}

/// The inode of one line of `/proc/net/unix` when it is a stream socket named `path` that is not
/// listening (the flag `__SO_ACCEPTCON`, 0x10000, unset).
fn connection_at_path(line: &str, path: &str) -> Option<u64> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let flags = u32::from_str_radix(fields.get(3)?, 16).ok()?;
    let stream = *fields.get(4)? == "0001";
    let inode = fields.get(6)?.parse().ok()?;
    let named = fields.get(7..).filter(|name| !name.is_empty())?.join(" ");
    (stream && flags & 0x10000 == 0 && named == path).then_some(inode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn counts_the_accepted_side_only() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(held_on_port(port), 0, "the listener counted");
        let clients: Vec<_> = (0..3)
            .map(|_| TcpStream::connect(listener.local_addr().unwrap()).unwrap())
            .collect();
        assert_eq!(held_on_port(port), 0, "the clients or the backlog counted");
        let accepted: Vec<_> = (0..3).map(|_| listener.accept().unwrap().0).collect();
        assert_eq!(held_on_port(port), 3);
        let duplicate = accepted[0].try_clone().unwrap();
        assert_eq!(held_on_port(port), 4);
        drop((duplicate, accepted));
        assert_eq!(held_on_port(port), 0);
        drop(clients);
    }

    #[test]
    fn counts_the_accepted_side_of_a_unix_socket_only() {
        use std::os::unix::net::{UnixListener, UnixStream};
        let dir = std::env::temp_dir().join(format!("testkit-sockets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        assert_eq!(held_at_path(&path), 0, "the listener counted");
        let clients: Vec<_> = (0..3)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        assert_eq!(held_at_path(&path), 0, "the clients or the backlog counted");
        let accepted: Vec<_> = (0..3).map(|_| listener.accept().unwrap().0).collect();
        assert_eq!(held_at_path(&path), 3);
        let duplicate = accepted[0].try_clone().unwrap();
        assert_eq!(held_at_path(&path), 4);
        drop((duplicate, accepted, clients, listener));
        assert_eq!(held_at_path(&path), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_a_line_of_the_kernels_table() {
        let line = "   1: 0100007F:1F90 0100007F:8EA6 01 00000000:00000000 00:00000000 00000000     0        0 8803 1 0000000000000000 20 4 0 50 148";
        assert_eq!(connection_on_port(line, 0x1F90), Some(8803));
        assert_eq!(connection_on_port(line, 0x8EA6), None);
        let listening = line.replace(" 01 ", " 0A ");
        assert_eq!(connection_on_port(&listening, 0x1F90), None);
        assert_eq!(socket_inode("socket:[8803]"), Some(8803));
        assert_eq!(socket_inode("pipe:[8803]"), None);
        let unix = "0000000055b1b2c9: 00000003 00000000 00000000 0001 03 20516 /run/x.sock";
        assert_eq!(connection_at_path(unix, "/run/x.sock"), Some(20516));
        assert_eq!(connection_at_path(unix, "/run/y.sock"), None);
        let listening = unix.replace(" 00000000 0001 ", " 00010000 0001 ");
        assert_eq!(connection_at_path(&listening, "/run/x.sock"), None);
        let client = "0000000055b1b2c9: 00000003 00000000 00000000 0001 03 20517";
        assert_eq!(connection_at_path(client, ""), None);
    }
}

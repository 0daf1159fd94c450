//! Held listening sockets (cobble extension, a service's `sockets:`).
//!
//! The daemon binds each socket a service names when the plan takes it, keeps it open across
//! every stop and start of that service, and passes it to each run as a file descriptor from 3
//! on with `LISTEN_FDS`, `LISTEN_PID` and `LISTEN_FDNAMES`, as systemd's socket activation
//! does. While the service is down, clients wait in the kernel's backlog instead of being
//! refused. This module is the model: what a layer may write, how layers merge it, and what
//! an address means. Binding is the daemon's.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One socket the daemon holds for a service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeldSocket {
    /// Where it listens, as the layer wrote it (see [`ListenAddress::parse`]).
    pub listen: String,
    /// The most connections waiting to be accepted; the kernel's limit (`somaxconn`) when
    /// unset.
    pub backlog: Option<u32>,
    /// A unix socket's file mode, in octal (`"0660"`); the daemon's umask decides when unset.
    pub mode: String,
    /// A unix socket file's owner, a user name or numeric ID; the daemon's user when unset.
    pub user: String,
    /// A unix socket file's group, a group name or numeric ID; the user's group when unset.
    pub group: String,
}

impl HeldSocket {
    /// Another layer's entry for the same name on top of this one: what it sets wins.
    pub fn merge(&mut self, other: &HeldSocket) {
        crate::service::merge_string(&mut self.listen, &other.listen);
        crate::service::merge_option(&mut self.backlog, other.backlog);
        crate::service::merge_string(&mut self.mode, &other.mode);
        crate::service::merge_string(&mut self.user, &other.user);
        crate::service::merge_string(&mut self.group, &other.group);
    }

    /// The address it listens on. Layers are validated when they are read, so a socket of a
    /// plan always has one.
    pub fn address(&self) -> Result<ListenAddress, String> {
        ListenAddress::parse(&self.listen)
    }

    /// The file mode as a number, when set.
    pub fn file_mode(&self) -> Result<Option<u32>, String> {
        parse_mode(&self.mode)
    }
}

/// Where a held socket listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddress {
    /// A TCP port on one address.
    Tcp(SocketAddr),
    /// A TCP port on every interface, IPv6 and IPv4 alike where the host has IPv6 (`:4443`
    /// or `4443`, as systemd's `ListenStream=4443`).
    AnyTcp(u16),
    /// A unix stream socket at an absolute path.
    Unix(String),
}

/// What a `listen` value may be, for error messages.
const LISTEN_FORMS: &str = "must be HOST:PORT, [HOST]:PORT, :PORT or PORT with a numeric host, or the absolute path of a unix socket";

impl ListenAddress {
    /// Parses `listen`: `0.0.0.0:4443`, `127.0.0.1:8080`, `[::]:4443`, `[::1]:80`, `:4443`,
    /// `4443`, or an absolute path for a unix socket. Hosts are numeric, as the address is
    /// bound before any name service can be trusted, and port 0 (any free port) is refused:
    /// clients must know where to connect.
    pub fn parse(listen: &str) -> Result<ListenAddress, String> {
        if listen.is_empty() {
            return Err("must be set".into());
        }
        if listen.starts_with('/') {
            if listen.len() > MAX_UNIX_PATH {
                return Err(format!(
                    "is longer than the {MAX_UNIX_PATH} bytes a unix socket path may have"
                ));
            }
            return Ok(ListenAddress::Unix(listen.to_owned()));
        }
        let port_only = listen.strip_prefix(':').unwrap_or(listen);
        let address = if port_only.bytes().all(|b| b.is_ascii_digit()) {
            let port = port_only
                .parse::<u16>()
                .map_err(|_| format!("{LISTEN_FORMS} (port {port_only} is out of range)"))?;
            ListenAddress::AnyTcp(port)
        } else {
            let address = listen
                .parse::<SocketAddr>()
                .map_err(|_| LISTEN_FORMS.to_owned())?;
            if address.ip().is_unspecified() && address.ip().is_ipv6() {
                // `[::]:4443` listens on every interface, as systemd binds it.
                ListenAddress::AnyTcp(address.port())
            } else {
                ListenAddress::Tcp(address)
            }
        };
        if address.port() == Some(0) {
            return Err("must name a port other than 0".into());
        }
        Ok(address)
    }

    /// The TCP port, for TCP sockets.
    pub fn port(&self) -> Option<u16> {
        match self {
            ListenAddress::Tcp(address) => Some(address.port()),
            ListenAddress::AnyTcp(port) => Some(*port),
            ListenAddress::Unix(_) => None,
        }
    }

    /// Whether a TCP connection to `ip:port` reaches this socket (a `tcp` check's target,
    /// say): the same port, on this address or on every interface.
    pub fn accepts(&self, ip: IpAddr, port: u16) -> bool {
        match self {
            ListenAddress::Tcp(address) => {
                address.port() == port
                    && (address.ip() == ip
                        || (address.ip().is_unspecified() && ip.is_ipv4() == address.is_ipv4()))
            }
            ListenAddress::AnyTcp(own) => *own == port,
            ListenAddress::Unix(_) => false,
        }
    }

    /// Whether two addresses cannot both be bound: the same unix path, or the same port
    /// where one of them listens on every interface or both on the same address.
    pub fn overlaps(&self, other: &ListenAddress) -> bool {
        match (self, other) {
            (ListenAddress::Unix(a), ListenAddress::Unix(b)) => a == b,
            (ListenAddress::Unix(_), _) | (_, ListenAddress::Unix(_)) => false,
            (ListenAddress::Tcp(a), ListenAddress::Tcp(b)) => {
                a.port() == b.port()
                    && (a.ip() == b.ip()
                        || (a.is_ipv4() == b.is_ipv4()
                            && (a.ip().is_unspecified() || b.ip().is_unspecified())))
            }
            (a, b) => a.port() == b.port(),
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Tcp(address) => write!(f, "{address}"),
            ListenAddress::AnyTcp(port) => {
                write!(
                    f,
                    "{}",
                    SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), *port)
                )
            }
            ListenAddress::Unix(path) => f.write_str(path),
        }
    }
}

/// A `tcp` check whose target is an address the daemon holds for a service. The kernel
/// accepts connections on a held socket whether or not the service runs, so such a check
/// succeeds while the service is down: it says nothing of the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldProbe {
    /// The check.
    pub check: String,
    /// The service holding the address.
    pub service: String,
    /// Its socket.
    pub socket: String,
    /// The check's target, `host:port`.
    pub target: String,
}

impl crate::Plan {
    /// The `tcp` checks that probe a held socket. A check's host is matched when it is an IP
    /// address or `localhost` (its default); another name cannot be told without resolving it.
    pub fn tcp_checks_on_held_sockets(&self) -> Vec<HeldProbe> {
        self.services
            .keys()
            .flat_map(|service| self.tcp_checks_on_sockets_of(service))
            .collect()
    }

    /// [`crate::Plan::tcp_checks_on_held_sockets`] for the sockets of one service.
    pub fn tcp_checks_on_sockets_of(&self, service: &str) -> Vec<HeldProbe> {
        let Some(config) = self.services.get(service) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        if config.sockets.is_empty() {
            return found;
        }
        for (check, check_config) in &self.checks {
            let Some(tcp) = &check_config.tcp else {
                continue;
            };
            let Ok(port) = u16::try_from(tcp.port) else {
                continue;
            };
            let ips: Vec<IpAddr> = match tcp.host.as_str() {
                "" | "localhost" => vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()],
                host => match host.parse() {
                    Ok(ip) => vec![ip],
                    Err(_) => continue,
                },
            };
            for (socket, held) in &config.sockets {
                let Ok(address) = held.address() else {
                    continue;
                };
                if ips.iter().any(|&ip| address.accepts(ip, port)) {
                    let host = if tcp.host.is_empty() {
                        "localhost"
                    } else {
                        &tcp.host
                    };
                    found.push(HeldProbe {
                        check: check.clone(),
                        service: service.to_owned(),
                        socket: socket.clone(),
                        target: if host.contains(':') {
                            format!("[{host}]:{port}")
                        } else {
                            format!("{host}:{port}")
                        },
                    });
                }
            }
        }
        found
    }
}

/// The longest path a unix socket address holds (`sun_path` less its terminating zero).
const MAX_UNIX_PATH: usize = 107;

/// Parses a file mode written in octal (`0660`, `660`, `0o660`); `None` when empty.
pub(crate) fn parse_mode(text: &str) -> Result<Option<u32>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    let digits = text.strip_prefix("0o").unwrap_or(text);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 && !digits.is_empty() => Ok(Some(mode)),
        _ => Err("must be an octal file mode such as \"0660\"".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_systemd_reads_listen_stream() {
        let tcp = |s: &str| ListenAddress::Tcp(s.parse().unwrap());
        for (text, want) in [
            ("0.0.0.0:4443", tcp("0.0.0.0:4443")),
            ("127.0.0.1:8080", tcp("127.0.0.1:8080")),
            ("[::1]:80", tcp("[::1]:80")),
            ("[::]:4443", ListenAddress::AnyTcp(4443)),
            (":4443", ListenAddress::AnyTcp(4443)),
            ("4443", ListenAddress::AnyTcp(4443)),
            ("/run/app.sock", ListenAddress::Unix("/run/app.sock".into())),
        ] {
            assert_eq!(ListenAddress::parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_addresses_say_what_an_address_may_be() {
        for text in [
            "localhost:4443",
            "tcp://0.0.0.0:1",
            "relative/path.sock",
            "0.0.0.0",
            "[::1]",
            "1.2.3.4:99999",
        ] {
            let error = ListenAddress::parse(text).unwrap_err();
            assert!(error.starts_with("must be HOST:PORT"), "{text}: {error}");
        }
        assert_eq!(ListenAddress::parse(""), Err("must be set".into()));
        assert_eq!(
            ListenAddress::parse(":0"),
            Err("must name a port other than 0".into())
        );
        assert!(ListenAddress::parse(&format!("/{}", "x".repeat(107))).is_err());
    }

    #[test]
    fn overlapping_addresses_are_the_ones_that_cannot_both_be_bound() {
        let parse = |s: &str| ListenAddress::parse(s).unwrap();
        assert!(parse(":80").overlaps(&parse("127.0.0.1:80")));
        assert!(parse("0.0.0.0:80").overlaps(&parse("127.0.0.1:80")));
        assert!(parse("127.0.0.1:80").overlaps(&parse("127.0.0.1:80")));
        assert!(!parse("127.0.0.1:80").overlaps(&parse("127.0.0.2:80")));
        assert!(!parse("127.0.0.1:80").overlaps(&parse("127.0.0.1:81")));
        assert!(parse("/a.sock").overlaps(&parse("/a.sock")));
        assert!(!parse("/a.sock").overlaps(&parse(":80")));
    }

    #[test]
    fn a_check_reaches_a_socket_on_its_port_and_address() {
        let parse = |s: &str| ListenAddress::parse(s).unwrap();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(parse(":4443").accepts(local, 4443));
        assert!(parse("0.0.0.0:4443").accepts(local, 4443));
        assert!(parse("127.0.0.1:4443").accepts(local, 4443));
        assert!(!parse("127.0.0.1:4443").accepts(local, 4444));
        assert!(!parse("10.0.0.1:4443").accepts(local, 4443));
        assert!(!parse("[::1]:4443").accepts(local, 4443));
    }

    #[test]
    fn tcp_checks_on_a_held_address_are_found_and_others_are_not() {
        let plan = crate::Plan::from_layers(vec![
            crate::Layer::parse(
                0,
                "base",
                "services:\n  web:\n    override: replace\n    command: web\n    sockets:\n      https: {listen: \":4443\"}\n      admin: {listen: \"127.0.0.1:9000\"}\nchecks:\n  \
                 up: {override: replace, tcp: {port: 4443}}\n  \
                 admin: {override: replace, tcp: {host: 127.0.0.1, port: 9000}}\n  \
                 elsewhere: {override: replace, tcp: {host: 10.1.2.3, port: 9000}}\n  \
                 named: {override: replace, tcp: {host: db.internal, port: 4443}}\n  \
                 other-port: {override: replace, tcp: {port: 4444}}\n  \
                 http: {override: replace, http: {url: \"http://localhost:4443/\"}}\n",
            )
            .unwrap(),
        ])
        .unwrap();
        let found: Vec<(String, String, String)> = plan
            .tcp_checks_on_held_sockets()
            .into_iter()
            .map(|p| (p.check, p.socket, p.target))
            .collect();
        assert_eq!(
            found,
            [
                ("admin".into(), "admin".into(), "127.0.0.1:9000".into()),
                ("up".into(), "https".into(), "localhost:4443".into()),
            ]
        );
    }

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode(""), Ok(None));
        assert_eq!(parse_mode("0660"), Ok(Some(0o660)));
        assert_eq!(parse_mode("600"), Ok(Some(0o600)));
        assert_eq!(parse_mode("0o755"), Ok(Some(0o755)));
        assert!(parse_mode("0999").is_err());
        assert!(parse_mode("rw-").is_err());
        assert!(parse_mode("17777").is_err());
    }

    #[test]
    fn a_later_layer_changes_only_what_it_sets() {
        let mut socket = HeldSocket {
            listen: ":80".into(),
            backlog: Some(16),
            ..HeldSocket::default()
        };
        socket.merge(&HeldSocket {
            backlog: Some(64),
            mode: "0600".into(),
            ..HeldSocket::default()
        });
        assert_eq!(
            socket,
            HeldSocket {
                listen: ":80".into(),
                backlog: Some(64),
                mode: "0600".into(),
                ..HeldSocket::default()
            }
        );
    }
}

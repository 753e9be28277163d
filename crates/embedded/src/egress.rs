//! The egress proxy: the one way out of a tenant process's network namespace.
//!
//! A confined process has only `lo`. Between fork and exec, [`listen_in_child`] opens a
//! TCP listener on `127.0.0.1:`[`PROXY_PORT`] inside the child's namespace and passes
//! it to sless over a socketpair ([`channel`]); after the spawn, [`ParentEnd::receive`]
//! takes it and [`serve`] answers on it as an HTTP proxy (CONNECT and absolute-form
//! requests) that dials only what the process's [`Egress`] policy allows
//! ([`decide`]). Egress `none` starts no listener. The child learns the address from
//! [`proxy_variables`].
//!
//! One spawn, in order: `channel(&egress)` before it; in pre_exec, after the network
//! namespace exists and `lo` is up but before Landlock (whose bind rule would refuse
//! the port), `listen_in_child(&child_end)`; after the spawn, `parent.receive()` and
//! `serve(listener, policy)`, the [`EgressProxy`] kept as long as the process runs
//! (`tests/egress_e2e.rs`, `run_child`, does exactly this).

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::process::Owner;
pub use sless_api::{Egress, EgressRule};
use sless_core::logs::{LogBook, Stream};

/// Where the proxy listens inside every namespace (the port squid made familiar).
pub const PROXY_PORT: u16 = 3128;

/// The environment that points a child's HTTP clients (pip, npm, Go, curl, requests)
/// at the proxy; empty for egress `none`.
pub fn proxy_variables(egress: &Egress) -> Vec<(&'static str, String)> {
    if *egress == Egress::None {
        return Vec::new();
    }
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut vars: Vec<(&'static str, String)> =
        ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
            .into_iter()
            .map(|k| (k, url.clone()))
            .collect();
    // Loopback inside the namespace is the process itself, never the proxy's business.
    for k in ["NO_PROXY", "no_proxy"] {
        vars.push((k, "localhost,127.0.0.1,::1".into()));
    }
    vars
}

/// Limits of one process's proxy.
#[derive(Clone, Debug)]
pub struct ProxyLimits {
    /// Connections open at once from one process; more wait for a free one.
    pub max_connections: usize,
    /// Bytes of a request head.
    pub max_header_bytes: usize,
    /// A request head must arrive within this.
    pub header_timeout: Duration,
    /// A tunnel or connection with no byte in either direction for this long is closed.
    pub idle_timeout: Duration,
    /// Dialling one destination.
    pub connect_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_header_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

// ---- the decision ----

/// Why a destination is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    NoEgress,
    Loopback,
    HostAddress,
    Unspecified,
    LinkLocal,
    Private,
    Multicast,
    Reserved,
    NotListed,
}

impl Reason {
    fn text(self) -> &'static str {
        match self {
            Reason::NoEgress => "egress is \"none\"",
            Reason::Loopback => "loopback address",
            Reason::HostAddress => "an address of the sless host itself",
            Reason::Unspecified => "unspecified address",
            Reason::LinkLocal => "link-local address (includes cloud metadata 169.254.169.254)",
            Reason::Private => "private address",
            Reason::Multicast => "multicast or broadcast address",
            Reason::Reserved => "reserved address",
            Reason::NotListed => "not in the egress list",
        }
    }

    /// Whether a list entry can ever allow it.
    fn listable(self) -> bool {
        !matches!(
            self,
            Reason::Loopback | Reason::HostAddress | Reason::Unspecified
        )
    }
}

/// A refused destination, with the line the tenant reads (403 body and its log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub line: String,
}

/// Decides whether `owner`'s process may connect to `addr`, reached through `name`
/// when it asked for a name. `own` are the host's own addresses. Decided on the
/// address actually dialled, so a name cannot rebind to what its address may not be.
pub fn decide(
    owner: &str,
    egress: &Egress,
    name: Option<&str>,
    addr: SocketAddr,
    own: &[IpAddr],
) -> Result<(), Refusal> {
    let ip = canonical(addr.ip());
    let reason = match classify(ip, own) {
        Some(reason) if !reason.listable() => Some(reason),
        special => match egress {
            Egress::None => Some(Reason::NoEgress),
            Egress::Internet => special,
            Egress::Allow(rules) => {
                let name = name.map(|n| n.trim_end_matches('.').to_ascii_lowercase());
                let listed = rules.iter().any(|rule| match rule {
                    EgressRule::Host { host, port } => {
                        name.as_deref() == Some(host.as_str()) && *port == addr.port()
                    }
                    EgressRule::Net { net, port } => {
                        net_contains(net, ip) && port.is_none_or(|p| p == addr.port())
                    }
                });
                (!listed).then_some(Reason::NotListed)
            }
        },
    };
    let Some(reason) = reason else {
        return Ok(());
    };
    let target = SocketAddr::new(ip, addr.port());
    let shown = match name {
        Some(name) => format!("{name}:{} ({target})", addr.port()),
        None => target.to_string(),
    };
    let hint = if !reason.listable() {
        "no egress setting allows it".to_string()
    } else if reason == Reason::NoEgress {
        "set egress to \"internet\" or a list to allow connections".to_string()
    } else {
        let entry = match name {
            Some(name) => format!("{name}:{}", addr.port()),
            None if ip.is_ipv6() => format!("[{ip}]:{}", addr.port()),
            None => format!("{ip}:{}", addr.port()),
        };
        format!("allow it with egress: [\"{entry}\"]")
    };
    Err(Refusal {
        reason,
        line: format!(
            "egress policy of {owner} refuses {shown}: {}; {hint}",
            reason.text()
        ),
    })
}

fn net_contains(net: &IpNet, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpNet::V4(net), IpAddr::V4(ip)) => net.contains(&ip),
        (IpNet::V6(net), IpAddr::V6(ip)) => net.contains(&ip),
        _ => false,
    }
}

/// IPv4-mapped and -compatible IPv6 forms as the IPv4 address they reach.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                // ::a.b.c.d (deprecated IPv4-compatible), but not :: and ::1.
                if s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1) {
                    IpAddr::V4(Ipv4Addr::from_bits(v6.to_bits() as u32))
                } else {
                    ip
                }
            }
        },
        v4 => v4,
    }
}

/// What makes an address special; `None` = a public address.
fn classify(ip: IpAddr, own: &[IpAddr]) -> Option<Reason> {
    if ip.is_loopback() {
        return Some(Reason::Loopback);
    }
    if ip.is_unspecified() {
        return Some(Reason::Unspecified);
    }
    if own.iter().any(|o| canonical(*o) == ip) {
        return Some(Reason::HostAddress);
    }
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], len: u8) -> bool {
    ipnet::Ipv4Net::new(Ipv4Addr::from(net), len).is_ok_and(|n| n.contains(&ip))
}

fn classify_v4(ip: Ipv4Addr) -> Option<Reason> {
    if in_v4(ip, [0, 0, 0, 0], 8) {
        Some(Reason::Unspecified)
    } else if ip.is_link_local() {
        Some(Reason::LinkLocal)
    } else if ip.is_private() || in_v4(ip, [100, 64, 0, 0], 10) {
        Some(Reason::Private)
    } else if ip.is_multicast() || ip.is_broadcast() {
        Some(Reason::Multicast)
    } else if in_v4(ip, [240, 0, 0, 0], 4) {
        Some(Reason::Reserved)
    } else {
        None
    }
}

fn classify_v6(ip: Ipv6Addr) -> Option<Reason> {
    let first = ip.segments()[0];
    if first & 0xffc0 == 0xfe80 {
        Some(Reason::LinkLocal)
    } else if first & 0xfe00 == 0xfc00 {
        Some(Reason::Private)
    } else if ip.is_multicast() {
        Some(Reason::Multicast)
    } else if first & 0xffc0 == 0xfec0 {
        // Deprecated site-local: as private as fc00::/7.
        Some(Reason::Private)
    } else {
        None
    }
}

/// The addresses of this host's interfaces, re-read at most every few seconds so an
/// address added after start is refused too.
pub fn host_addresses() -> Arc<Vec<IpAddr>> {
    static CACHE: Mutex<Option<(Instant, Arc<Vec<IpAddr>>)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    match &*cache {
        Some((at, addrs)) if at.elapsed() < Duration::from_secs(5) => addrs.clone(),
        _ => {
            let addrs = Arc::new(interface_addresses().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot list the host's addresses");
                Vec::new()
            }));
            *cache = Some((Instant::now(), addrs.clone()));
            addrs
        }
    }
}

fn interface_addresses() -> io::Result<Vec<IpAddr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut addrs = Vec::new();
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: a node of the list getifaddrs returned; sockaddr read by its family.
        unsafe {
            let sa = (*entry).ifa_addr;
            if !sa.is_null() {
                match i32::from((*sa).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(sa as *const libc::sockaddr_in);
                        addrs.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(sa as *const libc::sockaddr_in6);
                        addrs.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            entry = (*entry).ifa_next;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(addrs)
}

// ---- passing the listener out of the child's namespace ----

/// sless's end of the socketpair.
#[derive(Debug)]
pub struct ParentEnd(OwnedFd);

/// The child's end; moved into the pre_exec closure, closed at exec.
#[derive(Debug)]
pub struct ChildEnd(OwnedFd);

impl AsRawFd for ChildEnd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Before a spawn: the socketpair that carries the child's listener out of its
/// namespace, or `None` for egress `none` (no listener, no way out).
pub fn channel(egress: &Egress) -> io::Result<Option<(ParentEnd, ChildEnd)>> {
    match egress {
        Egress::None => Ok(None),
        _ => socketpair().map(Some),
    }
}

/// The channel of a standby, whose policy comes when it is bound: its listener is
/// made at spawn and waits, unserved, until then.
pub fn standby_channel() -> io::Result<(ParentEnd, ChildEnd)> {
    socketpair()
}

/// Both ends close on exec.
fn socketpair() -> io::Result<(ParentEnd, ChildEnd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    let ok = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if ok != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors owned by nobody else.
    Ok(unsafe {
        (
            ParentEnd(OwnedFd::from_raw_fd(fds[0])),
            ChildEnd(OwnedFd::from_raw_fd(fds[1])),
        )
    })
}

/// Space for one descriptor's control message, aligned for `cmsghdr`.
#[repr(C)]
union ControlBuffer {
    _align: libc::cmsghdr,
    bytes: [u8; 64],
}

/// In the child, between fork and exec and after its network namespace exists (with
/// `lo` up): listens on `127.0.0.1:PROXY_PORT` there and sends the listener to sless.
/// Async-signal-safe: system calls on stack data only, no allocation.
pub fn listen_in_child(end: &ChildEnd) -> io::Result<()> {
    // SAFETY: plain system calls on stack buffers and descriptors this function owns.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fail = |fd: RawFd| {
            let e = io::Error::last_os_error();
            libc::close(fd);
            Err(e)
        };
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = PROXY_PORT.to_be();
        addr.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
        if libc::bind(
            fd,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(fd, 128) != 0
        {
            return fail(fd);
        }
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = ControlBuffer { bytes: [0; 64] };
        let space = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = (&raw mut control).cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(end.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) != 1 {
            return fail(fd);
        }
        libc::close(fd);
    }
    Ok(())
}

impl ParentEnd {
    /// After a successful spawn: the listener the child sent (it sent it before exec,
    /// so it is already there; nothing there means the child never listened).
    pub fn receive(self) -> io::Result<std::net::TcpListener> {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = ControlBuffer { bytes: [0; 64] };
        // SAFETY: recvmsg into stack buffers; the control message is read only when
        // the kernel says it holds SCM_RIGHTS.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = (&raw mut control).cast();
            msg.msg_controllen = size_of::<ControlBuffer>() as _;
            let n = libc::recvmsg(
                self.0.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            );
            if n < 0 {
                let e = io::Error::last_os_error();
                return Err(match e.kind() {
                    io::ErrorKind::WouldBlock => io::Error::other(
                        "the process sent no egress listener (it did not run listen_in_child)",
                    ),
                    _ => e,
                });
            }
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null()
                || (*cmsg).cmsg_level != libc::SOL_SOCKET
                || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            {
                return Err(io::Error::other("the egress channel carried no descriptor"));
            }
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
            Ok(std::net::TcpListener::from(OwnedFd::from_raw_fd(fd)))
        }
    }
}

// ---- the proxy ----

/// Where a refusal line goes besides the 403: the owner's log.
pub type RefusalLog = Arc<dyn Fn(&str) + Send + Sync>;

/// Refusals as stderr lines of the owner's log, under the version it runs now.
pub(crate) fn log_book(logs: Arc<LogBook>, owner: Arc<Mutex<Owner>>) -> RefusalLog {
    Arc::new(move |line: &str| {
        let owner = owner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        logs.push(
            &owner.namespace,
            &owner.name,
            Stream::Stderr,
            &owner.version,
            line,
        );
    })
}

/// One process's policy: whose it is and what it allows.
#[derive(Clone)]
pub struct Policy {
    /// `<namespace>/<name>`, as refusals name it.
    pub owner: String,
    pub egress: Egress,
    pub log: RefusalLog,
    pub limits: ProxyLimits,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("owner", &self.owner)
            .field("egress", &self.egress)
            .finish_non_exhaustive()
    }
}

/// The serving task; dropping it closes the listener and every connection (and with
/// them the last hold on the process's network namespace).
#[derive(Debug)]
pub struct EgressProxy {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the proxy on `listener` (from [`ParentEnd::receive`]) until dropped.
pub fn serve(listener: std::net::TcpListener, policy: Policy) -> io::Result<EgressProxy> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let policy = Arc::new(policy);
    let slots = Arc::new(Semaphore::new(policy.limits.max_connections));
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(owner = %policy.owner, error = %e, "egress accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                // Reap finished connections so the set stays small.
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            // The slot is held by the connection and by a tunnel it turns into.
            connections.spawn(serve_connection(stream, policy.clone(), Arc::new(permit)));
        }
    });
    Ok(EgressProxy { task })
}

type Body = BoxBody<Bytes, hyper::Error>;

/// One of the process's connection slots.
type Slot = Arc<OwnedSemaphorePermit>;

async fn serve_connection(stream: TcpStream, policy: Arc<Policy>, slot: Slot) {
    let limits = policy.limits.clone();
    let service = hyper::service::service_fn(move |req| {
        let (policy, slot) = (policy.clone(), slot.clone());
        async move { Ok::<_, Infallible>(handle(req, policy, slot).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "egress connection ended");
    }
}

fn text(status: StatusCode, line: &str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(format!("{line}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A failure answered to the client.
struct Answer(StatusCode, String);

async fn handle(req: Request<Incoming>, policy: Arc<Policy>, slot: Slot) -> Response<Body> {
    match route(req, &policy, slot).await {
        Ok(response) => response,
        Err(Answer(status, line)) => {
            if status == StatusCode::FORBIDDEN {
                (policy.log)(&line);
            }
            text(status, &line)
        }
    }
}

async fn route(
    req: Request<Incoming>,
    policy: &Policy,
    slot: Slot,
) -> Result<Response<Body>, Answer> {
    // hyper's read buffer cap lets a head of up to about twice its size through
    // when the bytes arrive in one read; the limit is checked here as written.
    if head_bytes(&req) > policy.limits.max_header_bytes {
        return Err(Answer(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("request head over {} bytes", policy.limits.max_header_bytes),
        ));
    }
    if req.method() == Method::CONNECT {
        let (host, port) = req
            .uri()
            .authority()
            .and_then(|a| Some((a.host().to_string(), a.port_u16()?)))
            .ok_or_else(|| Answer(StatusCode::BAD_REQUEST, "CONNECT needs host:port".into()))?;
        let upstream = dial(policy, &host, port).await?;
        let idle = policy.limits.idle_timeout;
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let mut client = TokioIo::new(upgraded);
                    let mut upstream = upstream;
                    relay(&mut client, &mut upstream, idle).await;
                    drop(slot);
                }
                Err(e) => tracing::debug!(error = %e, "egress CONNECT upgrade failed"),
            }
        });
        return Ok(Response::new(
            Full::new(Bytes::new())
                .map_err(|never| match never {})
                .boxed(),
        ));
    }
    forward(req, policy).await
}

/// Bytes of a request's head as it was sent, give or take whitespace.
fn head_bytes<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    req.headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + line
}

/// A plain-HTTP absolute-form request (`GET http://host/path`), sent on a fresh
/// connection to a checked address.
async fn forward(mut req: Request<Incoming>, policy: &Policy) -> Result<Response<Body>, Answer> {
    let uri = req.uri().clone();
    let not_proxy = || {
        Answer(
            StatusCode::BAD_REQUEST,
            "this is sless's egress proxy: send absolute-form http:// requests or CONNECT \
             host:port (https goes through CONNECT)"
                .into(),
        )
    };
    if uri.scheme_str() != Some("http") {
        return Err(not_proxy());
    }
    let authority = uri.authority().ok_or_else(not_proxy)?.clone();
    let port = authority.port_u16().unwrap_or(80);
    let upstream = dial(policy, authority.host(), port).await?;
    for hop in [
        "connection",
        "proxy-connection",
        "proxy-authorization",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    ] {
        req.headers_mut().remove(hop);
    }
    if !req.headers().contains_key(header::HOST) {
        let host = HeaderValue::from_str(authority.as_str()).map_err(|_| not_proxy())?;
        req.headers_mut().insert(header::HOST, host);
    }
    *req.uri_mut() = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .parse()
        .map_err(|_| not_proxy())?;
    let bad_gateway =
        |e: hyper::Error| Answer(StatusCode::BAD_GATEWAY, format!("{authority}: {e}"));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(upstream))
        .await
        .map_err(bad_gateway)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "egress upstream connection ended");
        }
    });
    let response = sender.send_request(req).await.map_err(bad_gateway)?;
    Ok(response.map(BodyExt::boxed))
}

/// Resolves `host`, checks every address against the policy, and connects to the
/// first that answers: the checked address is the one dialled.
async fn dial(policy: &Policy, host: &str, port: u16) -> Result<TcpStream, Answer> {
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let (name, addrs) = match literal {
        Some(ip) => (None, vec![SocketAddr::new(ip, port)]),
        None => {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| {
                    Answer(
                        StatusCode::BAD_GATEWAY,
                        format!("cannot resolve {host}: {e}"),
                    )
                })?
                .collect();
            (Some(host), addrs)
        }
    };
    let own = host_addresses();
    for addr in &addrs {
        if let Err(refusal) = decide(&policy.owner, &policy.egress, name, *addr, &own) {
            return Err(Answer(StatusCode::FORBIDDEN, refusal.line));
        }
    }
    let mut last = format!("{host}:{port} has no address");
    for addr in addrs {
        match tokio::time::timeout(policy.limits.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("cannot connect to {host}:{port} ({addr}): {e}"),
            Err(_) => last = format!("connecting to {host}:{port} ({addr}) timed out"),
        }
    }
    Err(Answer(StatusCode::BAD_GATEWAY, last))
}

/// Copies both ways until either side closes or nothing moves for `idle`.
async fn relay<A, B>(a: &mut A, b: &mut B, idle: Duration)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut from_a = vec![0u8; 16 * 1024];
    let mut from_b = vec![0u8; 16 * 1024];
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        tokio::select! {
            read = a.read(&mut from_a), if a_open => match read {
                Ok(0) | Err(_) => {
                    a_open = false;
                    let _ = b.shutdown().await;
                }
                Ok(n) => if b.write_all(&from_a[..n]).await.is_err() { return },
            },
            read = b.read(&mut from_b), if b_open => match read {
                Ok(0) | Err(_) => {
                    b_open = false;
                    let _ = a.shutdown().await;
                }
                Ok(n) => if a.write_all(&from_b[..n]).await.is_err() { return },
            },
            () = tokio::time::sleep(idle) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "team/fn";

    fn list(entries: &[&str]) -> Egress {
        Egress::Allow(entries.iter().map(|e| e.parse().unwrap()).collect())
    }

    fn check(egress: &Egress, name: Option<&str>, addr: &str) -> Result<(), Reason> {
        let own: [IpAddr; 2] = ["192.0.2.7".parse().unwrap(), "2001:db8::7".parse().unwrap()];
        decide(OWNER, egress, name, addr.parse().unwrap(), &own).map_err(|r| r.reason)
    }

    #[test]
    fn internet_allows_public_addresses_only() {
        let internet = Egress::Internet;
        for public in [
            "203.0.113.80:443",
            "1.1.1.1:53",
            "[2606:4700::1111]:443",
            "198.51.100.1:80",
        ] {
            assert_eq!(check(&internet, None, public), Ok(()), "{public}");
        }
        for (addr, reason) in [
            ("127.0.0.1:8080", Reason::Loopback),
            ("127.9.9.9:1", Reason::Loopback),
            ("[::1]:80", Reason::Loopback),
            ("0.0.0.0:80", Reason::Unspecified),
            ("0.1.2.3:80", Reason::Unspecified),
            ("[::]:80", Reason::Unspecified),
            ("192.0.2.7:22", Reason::HostAddress),
            ("[2001:db8::7]:22", Reason::HostAddress),
            ("169.254.169.254:80", Reason::LinkLocal),
            ("[fe80::1]:80", Reason::LinkLocal),
            ("10.0.0.5:5432", Reason::Private),
            ("172.16.0.1:80", Reason::Private),
            ("172.31.255.255:80", Reason::Private),
            ("192.168.1.1:80", Reason::Private),
            ("100.64.0.1:80", Reason::Private),
            ("100.127.255.255:80", Reason::Private),
            ("[fd00::1]:80", Reason::Private),
            ("[fc00::1]:80", Reason::Private),
            ("224.0.0.1:80", Reason::Multicast),
            ("255.255.255.255:80", Reason::Multicast),
            ("[ff02::1]:80", Reason::Multicast),
            ("240.0.0.1:80", Reason::Reserved),
            ("[::ffff:127.0.0.1]:80", Reason::Loopback),
            ("[::ffff:10.0.0.5]:80", Reason::Private),
            ("[::ffff:169.254.169.254]:80", Reason::LinkLocal),
            ("[::10.0.0.5]:80", Reason::Private),
            ("[::ffff:192.0.2.7]:80", Reason::HostAddress),
        ] {
            assert_eq!(check(&internet, None, addr), Err(reason), "{addr}");
        }
        // Just outside the private ranges.
        for edge in [
            "172.32.0.1:80",
            "100.128.0.1:80",
            "11.0.0.1:80",
            "192.169.0.1:80",
        ] {
            assert_eq!(check(&internet, None, edge), Ok(()), "{edge}");
        }
    }

    #[test]
    fn none_refuses_everything() {
        assert_eq!(
            check(&Egress::None, None, "203.0.113.80:443"),
            Err(Reason::NoEgress)
        );
    }

    #[test]
    fn a_list_allows_only_what_it_lists() {
        let egress = list(&[
            "10.200.0.2:5432",
            "10.1.0.0/16",
            "api.example.com:443",
            "[fd00::/8]:53",
        ]);
        assert_eq!(check(&egress, None, "10.200.0.2:5432"), Ok(()));
        assert_eq!(
            check(&egress, None, "10.200.0.2:5433"),
            Err(Reason::NotListed)
        );
        assert_eq!(check(&egress, None, "10.1.2.3:1"), Ok(()));
        assert_eq!(check(&egress, None, "[::ffff:10.1.2.3]:1"), Ok(()));
        assert_eq!(check(&egress, None, "10.2.0.1:1"), Err(Reason::NotListed));
        assert_eq!(check(&egress, None, "[fd00::5]:53"), Ok(()));
        assert_eq!(check(&egress, None, "[fd00::5]:54"), Err(Reason::NotListed));
        // A name entry matches the name asked for, whatever public address it has...
        assert_eq!(
            check(&egress, Some("API.example.com."), "203.0.113.9:443"),
            Ok(())
        );
        assert_eq!(
            check(&egress, Some("api.example.com"), "203.0.113.9:80"),
            Err(Reason::NotListed)
        );
        // ...but not an address given directly, nor other public addresses.
        assert_eq!(
            check(&egress, None, "203.0.113.9:443"),
            Err(Reason::NotListed)
        );
        assert_eq!(check(&egress, None, "1.1.1.1:443"), Err(Reason::NotListed));
    }

    #[test]
    fn a_list_never_reaches_loopback_or_the_host() {
        let egress = list(&[
            "127.0.0.0/8",
            "::1",
            "192.0.2.7",
            "0.0.0.0/0",
            "localhost:80",
        ]);
        assert_eq!(check(&egress, None, "127.0.0.1:80"), Err(Reason::Loopback));
        assert_eq!(check(&egress, None, "[::1]:80"), Err(Reason::Loopback));
        assert_eq!(
            check(&egress, None, "192.0.2.7:80"),
            Err(Reason::HostAddress)
        );
        assert_eq!(
            check(&egress, Some("localhost"), "127.0.0.1:80"),
            Err(Reason::Loopback)
        );
        assert_eq!(check(&egress, None, "0.0.0.0:80"), Err(Reason::Unspecified));
        // The list may open what "internet" closes.
        assert_eq!(check(&egress, None, "10.0.0.5:5432"), Ok(()));
    }

    #[test]
    fn the_refusal_line_names_the_owner_the_target_and_the_fix() {
        let refusal = decide(
            OWNER,
            &Egress::Internet,
            None,
            "10.0.0.5:5432".parse().unwrap(),
            &[],
        )
        .unwrap_err();
        assert_eq!(
            refusal.line,
            "egress policy of team/fn refuses 10.0.0.5:5432: private address; \
             allow it with egress: [\"10.0.0.5:5432\"]"
        );
        let loopback = decide(
            OWNER,
            &list(&["127.0.0.1:80"]),
            Some("localhost"),
            "127.0.0.1:80".parse().unwrap(),
            &[],
        )
        .unwrap_err();
        assert!(
            loopback.line.contains(
                "localhost:80 (127.0.0.1:80): loopback address; no egress setting allows it"
            ),
            "{}",
            loopback.line
        );
    }

    #[test]
    fn refusals_reach_the_owners_log() {
        let logs = Arc::new(LogBook::new(10));
        let owner = Owner {
            namespace: "team".into(),
            name: "fn".into(),
            version: "v1".into(),
        };
        let log = log_book(logs.clone(), Arc::new(Mutex::new(owner)));
        log("egress policy of team/fn refuses 10.0.0.5:5432: private address");
        let lines = logs.tail("team", "fn", 10);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].stream, Stream::Stderr);
        assert_eq!(lines[0].version, "v1");
        assert!(lines[0].line.contains("refuses 10.0.0.5:5432"));
    }

    #[test]
    fn the_host_addresses_include_loopback() {
        assert!(host_addresses().contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }

    #[test]
    fn none_gets_no_proxy_variables() {
        assert!(proxy_variables(&Egress::None).is_empty());
        let vars = proxy_variables(&Egress::Internet);
        assert!(vars.contains(&("https_proxy", "http://127.0.0.1:3128".to_string())));
    }
}

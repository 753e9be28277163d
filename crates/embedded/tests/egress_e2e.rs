//! The egress proxy with real sockets: a server in a second network namespace on a
//! private address (reached from the host through a veth pair), the proxy serving
//! policies in front of it, and children in namespaces of their own that have only
//! the proxy as a way out. Needs root (`ip netns`, `unshare`).

use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sless_embedded::egress::{self, Egress, EgressProxy, Policy, ProxyLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SERVER_PORT: u16 = 8080;

/// A network namespace holding an HTTP server on 10.200.<n>.2, routed from the host.
struct Target {
    netns: String,
    addr: IpAddr,
    server: Child,
    _dir: tempfile::TempDir,
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip");
    assert!(status.success(), "ip {args:?}");
}

impl Target {
    fn start() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = (std::process::id() * 7 + NEXT.fetch_add(1, Ordering::SeqCst)) % 200 + 20;
        let netns = format!("sless-egress-{}-{n}", std::process::id());
        let (host_if, ns_if) = (format!("vegh{n}"), format!("vegn{n}"));
        // A pair left by a killed run of the test.
        let _ = Command::new("ip")
            .args(["link", "del", &host_if])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &netns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        ip(&["link", "set", &ns_if, "netns", &netns]);
        ip(&["addr", "add", &format!("10.200.{n}.1/24"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        let inside = ["netns", "exec", &netns, "ip"];
        let exec = |rest: &[&str]| ip(&[&inside[..], rest].concat());
        exec(&["addr", "add", &format!("10.200.{n}.2/24"), "dev", &ns_if]);
        exec(&["link", "set", &ns_if, "up"]);
        exec(&["link", "set", "lo", "up"]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hello"), "hello from the private server\n").unwrap();
        let addr: IpAddr = format!("10.200.{n}.2").parse().unwrap();
        let server = Command::new("ip")
            .args(["netns", "exec", &netns, "python3", "-m", "http.server"])
            .args([&SERVER_PORT.to_string(), "--bind", &addr.to_string()])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect((addr, SERVER_PORT)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the server in {netns} did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            netns,
            addr,
            server,
            _dir: dir,
        }
    }

    fn entry(&self, port: u16) -> String {
        format!("{}:{port}", self.addr)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        // Deleting the namespace removes its veth end and with it the pair.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

/// A policy whose refusal lines are kept for the test to read.
fn policy(egress: Egress, limits: ProxyLimits) -> (Policy, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = lines.clone();
    let policy = Policy {
        owner: "team/fn".into(),
        egress,
        log: Arc::new(move |line: &str| kept.lock().unwrap().push(line.to_string())),
        limits,
    };
    (policy, lines)
}

fn list(entries: &[&str]) -> Egress {
    serde_json::from_value(serde_json::json!(entries)).unwrap()
}

/// A proxy served on a host loopback listener (the policy is what is under test).
fn proxy(
    egress: Egress,
    limits: ProxyLimits,
) -> (SocketAddr, EgressProxy, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (policy, lines) = policy(egress, limits);
    (addr, egress::serve(listener, policy).unwrap(), lines)
}

/// Reads an answer's head: the status and the rest read so far.
async fn read_head(stream: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head)
}

async fn read_rest(stream: &mut TcpStream) -> String {
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body).await;
    body
}

/// CONNECT through the proxy; on 200 a GET /hello inside the tunnel.
async fn connect(proxy: SocketAddr, target: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (status, _) = read_head(&mut stream).await;
    if status != 200 {
        return (status, read_body_line(&mut stream).await);
    }
    stream
        .write_all(b"GET /hello HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    (status, read_rest(&mut stream).await)
}

/// The one-line body of a refusal.
async fn read_body_line(stream: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).to_string()
}

/// A plain-HTTP absolute-form GET through the proxy.
async fn get(proxy: SocketAddr, url: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let request = format!("GET {url} HTTP/1.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (status, _) = read_head(&mut stream).await;
    (status, read_rest(&mut stream).await)
}

#[tokio::test]
async fn a_listed_private_server_is_reached_and_internet_refuses_it() {
    let target = Target::start();
    let (allowed, _keep, _) = proxy(list(&[&target.entry(SERVER_PORT)]), ProxyLimits::default());
    let (status, body) = connect(allowed, &target.entry(SERVER_PORT)).await;
    assert_eq!(status, 200);
    assert!(body.contains("hello from the private server"), "{body}");
    let url = format!("http://{}/hello", target.entry(SERVER_PORT));
    let (status, body) = get(allowed, &url).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("hello from the private server"), "{body}");
    // Another port of the same server is not listed.
    let (status, body) = connect(allowed, &target.entry(9)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("not in the egress list"), "{body}");

    let (internet, _keep, lines) = proxy(Egress::Internet, ProxyLimits::default());
    for (status, body) in [
        connect(internet, &target.entry(SERVER_PORT)).await,
        get(internet, &url).await,
    ] {
        assert_eq!(status, 403, "{body}");
        let expected = format!(
            "egress policy of team/fn refuses {}: private address; allow it with egress: [\"{}\"]",
            target.entry(SERVER_PORT),
            target.entry(SERVER_PORT)
        );
        assert_eq!(body.trim(), expected);
    }
    assert_eq!(lines.lock().unwrap().len(), 2, "each refusal is logged");
}

#[tokio::test]
async fn loopback_and_the_host_are_refused_even_when_listed() {
    let local = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = local.local_addr().unwrap().port();
    let host_ip = egress::host_addresses()
        .iter()
        .copied()
        .find(|a| a.is_ipv4() && !a.is_loopback())
        .expect("a non-loopback IPv4 address on this host");
    let egress = list(&[
        &format!("127.0.0.1:{port}"),
        &format!("localhost:{port}"),
        "0.0.0.0/0",
    ]);
    let (proxy, _keep, lines) = proxy(egress, ProxyLimits::default());
    for (target, reason) in [
        (format!("127.0.0.1:{port}"), "loopback address"),
        (format!("localhost:{port}"), "loopback address"),
        (format!("[::ffff:127.0.0.1]:{port}"), "loopback address"),
        (
            format!("{host_ip}:{port}"),
            "an address of the sless host itself",
        ),
    ] {
        let (status, body) = connect(proxy, &target).await;
        assert_eq!(status, 403, "{target}: {body}");
        assert!(body.contains(reason), "{target}: {body}");
        assert!(body.contains("no egress setting allows it"), "{body}");
    }
    assert_eq!(lines.lock().unwrap().len(), 4);
}

/// `/etc/hosts` gives the test a name for the private server; removed after.
struct HostsEntry(String);

impl HostsEntry {
    fn add(ip: IpAddr) -> Self {
        let name = format!("egress-test-{}.invalid", std::process::id());
        let mut hosts = std::fs::read_to_string("/etc/hosts").unwrap();
        hosts.push_str(&format!("{ip} {name}\n"));
        std::fs::write("/etc/hosts", hosts).unwrap();
        Self(name)
    }
}

impl Drop for HostsEntry {
    fn drop(&mut self) {
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let kept: String = hosts
            .lines()
            .filter(|l| !l.contains(&self.0))
            .map(|l| format!("{l}\n"))
            .collect();
        let _ = std::fs::write("/etc/hosts", kept);
    }
}

#[tokio::test]
async fn a_name_is_checked_on_the_address_it_resolves_to() {
    let target = Target::start();
    let name = HostsEntry::add(target.addr);
    let (internet, _keep, _) = proxy(Egress::Internet, ProxyLimits::default());
    let (status, body) = connect(internet, &format!("{}:{SERVER_PORT}", name.0)).await;
    assert_eq!(status, 403, "{body}");
    let refused = format!("({}): private address", target.entry(SERVER_PORT));
    assert!(body.contains(&refused), "{body}");
    // Listing the name allows what it resolves to (not loopback, not the host).
    let by_name = list(&[&format!("{}:{SERVER_PORT}", name.0)]);
    let (named, _keep, _) = proxy(by_name, ProxyLimits::default());
    let (status, body) = connect(named, &format!("{}:{SERVER_PORT}", name.0)).await;
    assert_eq!(status, 200, "{body}");
    // The address itself is not what was listed.
    let (status, _) = connect(named, &target.entry(SERVER_PORT)).await;
    assert_eq!(status, 403);
}

/// What a child in its own network namespace saw, as it printed it.
async fn run_child(egress: &Egress, script: &str, env: &[(&str, &str)]) -> String {
    let channel = egress::channel(egress).unwrap();
    let (parent, child_end) = match channel {
        Some((parent, child)) => (Some(parent), Some(child)),
        None => (None, None),
    };
    let mut command = Command::new("python3");
    command
        .args(["-c", script])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .envs(env.iter().copied())
        .envs(egress::proxy_variables(egress))
        .stdout(Stdio::piped());
    // SAFETY: unshare, ioctl, socket, bind, listen, sendmsg and close only.
    unsafe {
        command.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            loopback_up()?;
            match &child_end {
                Some(end) => egress::listen_in_child(end),
                None => Ok(()),
            }
        });
    }
    let child = command.spawn().unwrap();
    drop(command);
    let _served = parent.map(|p| {
        let (policy, _) = policy(egress.clone(), ProxyLimits::default());
        egress::serve(p.receive().unwrap(), policy).unwrap()
    });
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

fn loopback_up() -> std::io::Result<()> {
    // SAFETY: an ioctl on a fresh socket with a zeroed ifreq naming "lo".
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        request.ifr_name[0] = b'l' as libc::c_char;
        request.ifr_name[1] = b'o' as libc::c_char;
        request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let result = libc::ioctl(fd, libc::SIOCSIFFLAGS, &request);
        libc::close(fd);
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Python in the child: a proxied GET (urllib reads http_proxy), a CONNECT, and a
/// direct connection that bypasses the proxy.
fn child_script(target: &Target, port: u16) -> String {
    format!(
        r#"
import os, socket, urllib.request, urllib.error, http.client
def attempt(f):
    try:
        return f()
    except urllib.error.HTTPError as e:
        return "http %d %s" % (e.code, e.read().decode().strip())
    except Exception as e:
        return "error " + type(e).__name__
url = "http://{addr}:{port}/hello"
print("proxied:", attempt(lambda: urllib.request.urlopen(url, timeout=5).read().decode().strip()))
def tunnel():
    if "https_proxy" not in os.environ:
        raise ConnectionRefusedError()
    c = http.client.HTTPConnection("127.0.0.1", {proxy}, timeout=5)
    c.set_tunnel("{addr}", {port})
    c.request("GET", "/hello")
    return "tunnel " + c.getresponse().read().decode().strip()
print("connect:", attempt(tunnel))
print("direct:", attempt(lambda: socket.create_connection(("{addr}", {port}), timeout=2) and "connected"))
print("proxy port:", attempt(lambda: socket.create_connection(("127.0.0.1", {proxy}), timeout=2) and "open"))
"#,
        addr = target.addr,
        proxy = egress::PROXY_PORT,
    )
}

#[tokio::test]
async fn a_child_in_its_own_namespace_gets_out_only_through_the_proxy() {
    let target = Target::start();
    let allowed = list(&[&target.entry(SERVER_PORT)]);
    let out = run_child(&allowed, &child_script(&target, SERVER_PORT), &[]).await;
    assert!(
        out.contains("proxied: hello from the private server"),
        "{out}"
    );
    assert!(
        out.contains("connect: tunnel hello from the private server"),
        "{out}"
    );
    assert!(
        out.contains("direct: error OSError"),
        "no route without the proxy: {out}"
    );

    let out = run_child(&Egress::Internet, &child_script(&target, SERVER_PORT), &[]).await;
    assert!(
        out.contains("proxied: http 403 egress policy of team/fn refuses")
            && out.contains("private address"),
        "{out}"
    );
    assert!(out.contains("direct: error OSError"), "{out}");

    let out = run_child(&Egress::None, &child_script(&target, SERVER_PORT), &[]).await;
    assert!(
        out.contains("proxy port: error ConnectionRefusedError"),
        "no listener: {out}"
    );
    assert!(out.contains("direct: error OSError"), "{out}");
    assert!(!out.contains("hello from"), "{out}");
}

#[tokio::test]
async fn heads_connections_and_idle_tunnels_are_bounded() {
    let target = Target::start();
    let limits = ProxyLimits {
        max_connections: 2,
        idle_timeout: Duration::from_millis(500),
        ..ProxyLimits::default()
    };
    let (proxy, _keep, _) = proxy(list(&[&target.entry(SERVER_PORT)]), limits);

    let mut big = TcpStream::connect(proxy).await.unwrap();
    let head = format!(
        "GET http://{}/hello HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        target.entry(SERVER_PORT),
        "a".repeat(100 * 1024)
    );
    let _ = big.write_all(head.as_bytes()).await;
    let (status, _) = read_head(&mut big).await;
    assert!(
        status == 431 || status == 0,
        "a 100 KiB head is refused: {status}"
    );
    drop(big);

    // Two open tunnels fill the cap: a third waits until one closes.
    let mut tunnels = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        let request = format!("CONNECT {} HTTP/1.1\r\n\r\n", target.entry(SERVER_PORT));
        s.write_all(request.as_bytes()).await.unwrap();
        assert_eq!(read_head(&mut s).await.0, 200);
        tunnels.push(s);
    }
    let mut third = TcpStream::connect(proxy).await.unwrap();
    let request = format!("CONNECT {} HTTP/1.1\r\n\r\n", target.entry(SERVER_PORT));
    third.write_all(request.as_bytes()).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(300), read_head(&mut third)).await;
    assert!(
        waited.is_err(),
        "a third connection is not served while two are open"
    );

    // Idle tunnels are closed after 500 ms; then the third is served.
    let started = Instant::now();
    let eof = read_rest(&mut tunnels[0]).await;
    assert!(eof.is_empty());
    let idle = started.elapsed();
    assert!(idle < Duration::from_secs(3), "closed after {idle:?}");
    let (status, _) = tokio::time::timeout(Duration::from_secs(3), read_head(&mut third))
        .await
        .expect("the third connection is served once a slot is free");
    assert_eq!(status, 200);
}

/// Figures for docs/security.md: a CONNECT through the proxy against a direct
/// connection to the same server, each followed by one request and its answer.
#[tokio::test]
async fn bench_connect_through_the_proxy_against_direct() {
    let target = Target::start();
    let (allowed, _keep, _) = proxy(list(&[&target.entry(SERVER_PORT)]), ProxyLimits::default());
    const ROUNDS: u32 = 200;
    let direct_addr = SocketAddr::new(target.addr, SERVER_PORT);
    let started = Instant::now();
    for _ in 0..ROUNDS {
        let mut s = TcpStream::connect(direct_addr).await.unwrap();
        s.write_all(b"GET /hello HTTP/1.0\r\n\r\n").await.unwrap();
        assert!(read_rest(&mut s).await.contains("hello from"));
    }
    let direct = started.elapsed() / ROUNDS;
    let started = Instant::now();
    for _ in 0..ROUNDS {
        let (status, body) = connect(allowed, &target.entry(SERVER_PORT)).await;
        assert_eq!(status, 200);
        assert!(body.contains("hello from"));
    }
    let proxied = started.elapsed() / ROUNDS;
    println!(
        "connect + one request, mean of {ROUNDS}: direct {direct:?}, through the proxy {proxied:?} (+{:?})",
        proxied.saturating_sub(direct)
    );
}

/// Dependency installs reach PyPI and the npm registry through the proxy under
/// "internet" (the registries' addresses are public), and nothing under "none".
#[tokio::test]
async fn package_installs_reach_their_registries_through_the_proxy() {
    let script = r#"
import os, subprocess
pip = subprocess.run(["python3", "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                      "--timeout", "20", "--retries", "0", "-d", os.environ["HOME"], "six"],
                     capture_output=True, text=True)
print("pip:", pip.returncode, pip.stderr[-300:].replace("\n", " "))
npm = subprocess.run(["npm", "view", "left-pad", "version", "--fetch-retries", "0"],
                     capture_output=True, text=True)
print("npm:", npm.returncode, npm.stdout.strip())
"#;
    for (egress, reached) in [(Egress::Internet, true), (Egress::None, false)] {
        // A fresh HOME: no npm cache to answer from.
        let home = tempfile::tempdir().unwrap();
        let env = [
            ("HOME", home.path().to_str().unwrap()),
            ("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"),
        ];
        let out = run_child(&egress, script, &env).await;
        assert_eq!(out.contains("pip: 0"), reached, "{egress}: {out}");
        assert_eq!(out.contains("npm: 0 1.3.0"), reached, "{egress}: {out}");
    }
}

//! A private RabbitMQ (Debian's `rabbitmq-server`, installed by `.ci/run`) for the
//! tests of event triggers: its own node name, ports, epmd and directories, owned by
//! user `rabbitmq` when the tests run as root. Stopped when dropped.
// Shared by several test binaries, each using a part.
#![allow(dead_code)]

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

pub struct Broker {
    dir: tempfile::TempDir,
    pub port: u16,
    dist_port: u16,
    epmd_port: u16,
    node: String,
    child: Option<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn rabbitmq_ids() -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::ffi::CString::new("rabbitmq").unwrap();
    let user = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !user.is_null(),
        "user rabbitmq is missing: apt-get install rabbitmq-server"
    );
    let user = unsafe { &*user };
    Some((user.pw_uid, user.pw_gid))
}

fn chown_tree(path: &Path, ids: Option<(u32, u32)>) {
    let Some((uid, gid)) = ids else { return };
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), ids);
        }
    }
}

impl Broker {
    /// Starts a broker and waits until it takes connections.
    pub async fn start() -> Self {
        assert!(
            Path::new(SERVER).exists(),
            "{SERVER} is missing: apt-get install rabbitmq-server"
        );
        let dir = tempfile::Builder::new()
            .prefix("sless-rabbit")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        // The broker's user must reach its directories below the temporary root.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        chown_tree(dir.path(), rabbitmq_ids());
        let mut broker = Self {
            node: format!(
                "sless-test-{}-{}@localhost",
                std::process::id(),
                free_port()
            ),
            port: free_port(),
            dist_port: free_port(),
            epmd_port: free_port(),
            dir,
            child: None,
        };
        broker.launch().await;
        broker
    }

    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    async fn launch(&mut self) {
        let mut command = Command::new(SERVER);
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.path("home"))
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .env("RABBITMQ_MNESIA_BASE", self.path("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.path("log"))
            .env("RABBITMQ_LOGS", self.path("log/broker.log"))
            .env("RABBITMQ_FEATURE_FLAGS_FILE", self.path("feature_flags"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                self.path("enabled_plugins"),
            )
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", self.path("plugins"))
            .env("RABBITMQ_CONF_ENV_FILE", self.path("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", self.path("rabbitmq"))
            .env(
                "RABBITMQ_ADVANCED_CONFIG_FILE",
                self.path("advanced.config"),
            )
            .env("RABBITMQ_PID_FILE", self.path("broker.pid"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        if let Some((uid, gid)) = rabbitmq_ids() {
            command.uid(uid).gid(gid);
        }
        self.child = Some(command.spawn().expect("rabbitmq-server starts"));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if Connection::connect(&self.url(), ConnectionProperties::default())
                .await
                .is_ok()
            {
                return;
            }
            let exited = self.child.as_mut().unwrap().try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the broker did not start ({exited:?}); see {}",
                self.path("log").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills the broker at once (its whole process group), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// A crash and a start on the same data: durable queues and persistent messages
    /// survive.
    pub async fn restart(&mut self) {
        self.kill();
        self.launch().await;
    }

    /// A connection and a channel with publisher confirms, for the test's side.
    pub async fn client(&self) -> Client {
        let connection = Connection::connect(&self.url(), ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Client {
            _connection: connection,
            channel,
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        // epmd daemonizes out of the process group, and refuses to stop until it has
        // seen the killed node go.
        for _ in 0..50 {
            let Ok(output) = Command::new("epmd")
                .env("ERL_EPMD_PORT", self.epmd_port.to_string())
                .arg("-kill")
                .output()
            else {
                return;
            };
            if !String::from_utf8_lossy(&output.stdout).contains("not allowed") {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

pub struct Client {
    _connection: Connection,
    pub channel: Channel,
}

impl Client {
    /// Declares a durable queue, as the dispatcher would.
    pub async fn declare(&self, queue: &str) {
        self.channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::durable(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    /// Publishes a persistent message and waits for the broker's confirm.
    pub async fn publish(&self, queue: &str, body: &[u8], message_id: &str) {
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(message_id.into());
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(confirm.is_ack(), "the broker took the message");
    }

    /// Messages ready in a queue.
    pub async fn depth(&self, queue: &str) -> u32 {
        let options = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        self.channel
            .queue_declare(queue.into(), options, FieldTable::default())
            .await
            .unwrap()
            .message_count()
    }
}

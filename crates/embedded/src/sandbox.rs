//! The confinement of every process that runs tenant code: function instances, job
//! runs and dependency installs (pip and npm run package hooks). Landlock lets it read
//! only the system, the interpreters, the runtime wrappers and its own code, write only
//! its own directories, and signal no process outside its sandbox; a cgroup bounds its
//! memory (else an rlimit), CPU and number of processes; its own mount and network
//! namespaces ([`crate::namespaces`]) bound its scratch space and keep it off the host's
//! network, with the egress proxy ([`crate::egress`]) its one way out; when sless runs
//! as root the child drops every capability; its environment holds nothing of sless's
//! own.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope,
    path_beneath_rules,
};
use tokio::process::Command;

use crate::cgroup::{Cgroup, CgroupControl, Controller, Limits, rlimit_data};
use crate::egress;
use crate::namespaces::Host;
use crate::runtimes::Toolchain;
use sless_core::data_dir::create_private_dir;
use sless_core::model::Runtime;

/// The Landlock ABI whose rights sless asks for (6: file system and signal/abstract
/// socket scoping). Older kernels enforce the subset they know.
const ABI_WANTED: ABI = ABI::V6;

/// Read and execute for everyone: libraries, interpreters, certificates.
const SYSTEM_PATHS: &[&str] = &["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/opt"];

/// What of /etc programs need to load libraries, resolve names and check TLS; each
/// runtime's descriptor adds its own entries.
const ETC_PATHS: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "resolv.conf",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "protocols",
    "passwd",
    "group",
    "mime.types",
    "os-release",
    "debian_version",
    "lsb-release",
    "alpine-release",
    "redhat-release",
    "alternatives",
];

/// Devices a process may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Why a process was not started.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "this machine cannot confine tenant code ({0}), so the function would run \
         unsandboxed and could read sless's keys and other tenants' code or reach sless's \
         ports; start sless with --allow-unsandboxed (SLESS_ALLOW_UNSANDBOXED=1) to run \
         functions anyway"
    )]
    Unsupported(String),
    #[error("preparing the sandbox: {0}")]
    Ruleset(#[from] RulesetError),
    #[error("preparing the memory, CPU and pids limits: {0}")]
    Limits(#[from] std::io::Error),
    #[error("preparing the namespaces: {0}")]
    Namespaces(std::io::Error),
}

/// How tenant code is confined on this machine; decided once at start.
#[derive(Clone, Debug, PartialEq)]
enum Enforcement {
    /// Landlock and the namespaces.
    Full,
    /// A mechanism is missing (why), and the operator said to run functions anyway.
    Unsandboxed(String),
    /// A mechanism is missing: functions are refused with this reason.
    Refused(String),
}

/// The runner's sandbox settings.
#[derive(Debug)]
pub struct Sandbox {
    enforcement: Enforcement,
    /// The kernel's Landlock ABI, when it has one.
    landlock: Option<ABI>,
    /// `None`: this machine cannot make the namespaces (see `enforcement`).
    host: Option<Host>,
    /// Readable and executable by every confined process.
    shared_read: Vec<PathBuf>,
    cgroups: CgroupControl,
    /// Processes (and threads) per confined process tree; 0 = no limit.
    max_pids: u32,
    drop_capabilities: bool,
    path: String,
    lang: String,
}

/// What one process may touch.
pub struct Confinement<'a> {
    /// Read and execute: its code (the wrappers are shared by all).
    pub read: &'a [&'a Path],
    /// Read and write; the first one is its HOME and TMPDIR (created if missing).
    pub write: &'a [&'a Path],
    /// `None`: no limit (builds).
    pub memory_mb: Option<u32>,
    /// Thousandths of a core; `None`: no quota and the least weight (a standby).
    pub cpu_millis: Option<u32>,
    /// Scratch quota: a tmpfs of this many MB over its HOME, its own and gone with it.
    /// `None`: HOME is the directory itself (a build's caches are kept).
    pub disk_mb: Option<u32>,
    /// Its own network namespace has only `lo`; this policy's egress proxy is its one
    /// way out, and nothing it listens on is reachable from outside it. `None`: a
    /// standby's, given when it is bound ([`Guard::bind`]); its proxy's listener waits.
    pub egress: Option<egress::Policy>,
}

/// What the running process holds on to: its cgroup, to tell a limit it hit and to be
/// removed with it.
#[derive(Debug)]
pub struct Guard {
    cgroup: Option<Arc<Cgroup>>,
    egress: Option<ProxyState>,
}

/// A function's limits, given to a standby when it is bound.
#[derive(Clone, Copy, Debug)]
pub struct BoundLimits {
    pub memory_mb: u32,
    pub cpu_millis: u32,
    pub disk_mb: u32,
}

/// A process's egress proxy: its listener still to be received after the spawn, then
/// served for as long as the guard lives.
#[derive(Debug)]
enum ProxyState {
    /// The policy is `None` until a standby is bound.
    Pending(egress::ParentEnd, Option<egress::Policy>),
    /// Held, not read: dropping it stops the proxy.
    Serving { _proxy: egress::EgressProxy },
}

impl Guard {
    /// Right after a successful spawn: takes the egress listener the child made in its
    /// namespace and serves the proxy on it.
    pub fn spawned(&mut self) -> std::io::Result<()> {
        self.egress = match self.egress.take() {
            Some(ProxyState::Pending(end, Some(policy))) => Some(ProxyState::Serving {
                _proxy: egress::serve(end.receive()?, policy)?,
            }),
            other => other,
        };
        Ok(())
    }

    /// A standby is bound to a function: its memory and CPU limits (the cgroup's, else
    /// RLIMIT_DATA for memory), its largest file (`disk_mb`) and its egress proxy with the function's policy (egress
    /// `none`: the listener is closed, nothing answers on the proxy's port).
    pub fn bind(
        &mut self,
        pid: u32,
        limits: &BoundLimits,
        policy: egress::Policy,
    ) -> std::io::Result<()> {
        let BoundLimits {
            memory_mb,
            cpu_millis,
            disk_mb,
        } = *limits;
        let file_bytes = u64::from(disk_mb) << 20;
        set_rlimit(
            pid,
            libc::RLIMIT_FSIZE,
            libc::rlimit {
                rlim_cur: file_bytes,
                rlim_max: file_bytes,
            },
        )?;
        match self.cgroup.as_deref() {
            Some(cgroup) => {
                cgroup.set_limits(Some(memory_mb), Some(cpu_millis))?;
                if !cgroup.has(Controller::Memory) {
                    set_rlimit(pid, libc::RLIMIT_DATA, rlimit_data(memory_mb))?;
                }
            }
            None => set_rlimit(pid, libc::RLIMIT_DATA, rlimit_data(memory_mb))?,
        }
        self.egress = match self.egress.take() {
            Some(ProxyState::Pending(end, None)) => {
                let listener = end.receive()?;
                match policy.egress {
                    egress::Egress::None => None,
                    _ => Some(ProxyState::Serving {
                        _proxy: egress::serve(listener, policy)?,
                    }),
                }
            }
            other => other,
        };
        Ok(())
    }

    /// Why the process died when the kernel killed it for its memory limit.
    pub fn out_of_memory(&self) -> Option<String> {
        self.cgroup.as_deref().and_then(Cgroup::oom_reason)
    }

    /// Said once the pids limit refused a fork or a thread.
    pub fn pids_limit(&self) -> Option<String> {
        self.cgroup.as_deref().and_then(Cgroup::pids_reason)
    }

    /// SIGKILL to whatever the process forked that is still alive.
    pub fn kill_all(&self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill_all();
        }
    }

    /// Kills the process `pid` (through a pidfd: never another that reused its number)
    /// and whatever it forked (its cgroup), from any thread, once called.
    pub fn killer(&self, pid: u32) -> impl FnOnce() + Send + 'static {
        let cgroup = self.cgroup.as_ref().map(Arc::downgrade);
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let pidfd = (pidfd >= 0).then(|| {
            // SAFETY: a descriptor just returned to us, owned from here on.
            unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) }
        });
        move || {
            if let Some(pidfd) = pidfd {
                // SAFETY: signals through a descriptor we own; no memory is passed.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    );
                }
            }
            if let Some(cgroup) = cgroup.and_then(|c| c.upgrade()) {
                cgroup.kill_all();
            }
        }
    }

    /// The cgroup to watch for refused forks while the process runs, if it has a
    /// pids limit; gone once the process's guard is dropped.
    pub fn pids_watch(&self) -> Option<Weak<Cgroup>> {
        self.cgroup
            .as_ref()
            .filter(|c| c.has(Controller::Pids))
            .map(Arc::downgrade)
    }
}

impl Sandbox {
    /// Probes the kernel and the cgroups; logs what will be enforced.
    pub fn new(
        toolchain: &Toolchain,
        wrappers: &Path,
        data_dir: &Path,
        allow: bool,
        max_pids: u32,
    ) -> Self {
        // /proc/<sless pid>/environ and ptrace stay closed to processes of the same uid;
        // set before the probe, which must meet it as every child does.
        // SAFETY: prctl with integer arguments only.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        }
        let abi = landlock_abi();
        let landlock = match abi {
            Ok(version) if version >= 1 => Some(ABI::from(version)),
            _ => None,
        };
        let host = Host::new(&data_dir.join("run")).map_err(|e| e.to_string());
        let host = host.and_then(|host| host.probe().map(|()| host));
        let enforcement = enforcement(abi, host.as_ref().err(), allow);
        let host = host.ok();
        let mut shared_read: Vec<PathBuf> = SYSTEM_PATHS.iter().map(PathBuf::from).collect();
        let runtime_etc = Runtime::ALL.iter().flat_map(|r| r.descriptor().etc_paths);
        shared_read.extend(
            ETC_PATHS
                .iter()
                .chain(runtime_etc)
                .map(|p| Path::new("/etc").join(p)),
        );
        shared_read.push(wrappers.to_path_buf());
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        for tool in toolchain.programs() {
            if let Some(root) = install_root(tool, &path, data_dir) {
                shared_read.push(root);
            }
        }
        shared_read.retain(|p| {
            let covers = data_dir.starts_with(p);
            if covers && p.exists() {
                tracing::warn!(path = %p.display(), data_dir = %data_dir.display(),
                    "the data dir lies inside a system directory: functions may not read it");
            }
            !covers
        });
        let cgroups = CgroupControl::detect();
        // SAFETY: geteuid has no preconditions.
        let drop_capabilities = unsafe { libc::geteuid() } == 0;
        match &enforcement {
            Enforcement::Full => tracing::info!(
                limits = %cgroups.describe(),
                max_pids,
                drop_capabilities,
                user_namespace = !drop_capabilities,
                "functions run sandboxed with Landlock and their own mount and network namespaces"
            ),
            Enforcement::Unsandboxed(why) => tracing::error!(
                reason = %why,
                limits = %cgroups.describe(),
                landlock = landlock.is_some(),
                namespaces = host.is_some(),
                "NO SANDBOX: functions run without what is missing (--allow-unsandboxed)"
            ),
            Enforcement::Refused(why) => tracing::error!(
                reason = %why,
                "cannot confine tenant code: functions will be refused; \
                 --allow-unsandboxed runs them anyway"
            ),
        }
        Self {
            enforcement,
            landlock,
            host,
            shared_read,
            cgroups,
            max_pids,
            drop_capabilities,
            path,
            lang: std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".into()),
        }
    }

    /// Confines `command`: a fresh environment, and before exec the cgroup, the
    /// capabilities and the Landlock domain. The caller adds its own variables after.
    pub fn confine(
        &self,
        command: &mut Command,
        confinement: &Confinement<'_>,
    ) -> Result<Guard, SandboxError> {
        if let Enforcement::Refused(why) = &self.enforcement {
            return Err(SandboxError::Unsupported(why.clone()));
        }
        let home = confinement.write.first().copied();
        if let Some(home) = home {
            create_private_dir(home)?;
        }
        command
            .env_clear()
            .env("PATH", &self.path)
            .env("LANG", &self.lang);
        if let Some(home) = home {
            command.env("HOME", home).env("TMPDIR", home);
        }
        let ruleset = match self.landlock {
            Some(_) => Some(self.ruleset(confinement)?),
            None => None,
        };
        let namespaces = self
            .host
            .as_ref()
            .map(|host| host.namespaces(true, home.zip(confinement.disk_mb)))
            .transpose()
            .map_err(SandboxError::Namespaces)?;
        // Out of its own network namespace only through its egress proxy (none for
        // egress `none`); without namespaces (--allow-unsandboxed) it has the host's.
        let policy = &confinement.egress;
        let channel = match (&namespaces, policy) {
            (Some(_), Some(policy)) => egress::channel(&policy.egress),
            (Some(_), None) => egress::standby_channel().map(Some),
            (None, _) => Ok(None),
        };
        let (parent_end, child_end) = channel
            .map_err(SandboxError::Namespaces)?
            .map_or((None, None), |(parent, child)| (Some(parent), Some(child)));
        if let (Some(_), Some(policy)) = (&namespaces, policy) {
            command.envs(egress::proxy_variables(&policy.egress));
        }
        // Landlock skips a directory something is mounted on: the scratch tmpfs gets its
        // own rule, added in the child once it is mounted.
        let scratch_rule = match (&ruleset, namespaces.as_ref().and_then(|n| n.scratch())) {
            (Some(ruleset), Some(_)) => {
                Option::<OwnedFd>::from(ruleset.try_clone().map_err(SandboxError::Namespaces)?)
            }
            _ => None,
        };
        let write_access = self.landlock.map_or(0, |abi| {
            (AccessFs::from_all(ABI_WANTED) & AccessFs::from_all(abi)).bits()
        });
        let cgroup = self.cgroups.create(&Limits {
            memory_mb: confinement.memory_mb,
            cpu_millis: confinement.cpu_millis,
            max_pids: (self.max_pids > 0).then_some(self.max_pids),
        })?;
        let rlimit = confinement
            .memory_mb
            .filter(|_| !cgroup.as_ref().is_some_and(|c| c.has(Controller::Memory)));
        let join = cgroup.as_ref().map(Cgroup::joiner);
        let drop_capabilities = self.drop_capabilities;
        let mut ruleset = ruleset;
        // SAFETY: between fork and exec the closure makes only async-signal-safe system
        // calls (write, setrlimit, unshare, mount, prctl, capset, landlock_*) on data
        // prepared before the fork; the ruleset's Drop closes one descriptor.
        unsafe {
            command.pre_exec(move || {
                if let Some(join) = &join {
                    join()?;
                }
                if let Some(mb) = rlimit {
                    let limit = rlimit_data(mb);
                    if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                // Before the capabilities go: making namespaces and mounts needs them.
                if let Some(namespaces) = &namespaces {
                    namespaces.enter()?;
                    if let (Some(ruleset), Some(scratch)) = (&scratch_rule, namespaces.scratch()) {
                        allow_beneath(ruleset.as_raw_fd(), scratch, write_access)?;
                    }
                }
                // With `lo` up, before Landlock's bind rule applies.
                if let Some(end) = &child_end {
                    egress::listen_in_child(end)?;
                }
                if drop_capabilities {
                    drop_all_capabilities()?;
                }
                match ruleset.take() {
                    Some(ruleset) => restrict(ruleset),
                    None => no_new_privs(),
                }
            });
        }
        Ok(Guard {
            cgroup: cgroup.map(Arc::new),
            egress: parent_end.map(|end| ProxyState::Pending(end, policy.clone())),
        })
    }

    /// Whether a standby may be started before its function is known: only under the
    /// full sandbox, whose mount namespace receives the function's directories at bind.
    pub fn takes_standbys(&self) -> bool {
        self.enforcement == Enforcement::Full && self.host.is_some()
    }

    /// Bind-mounts host directories into the mount namespace of the confined process
    /// `pid` ([`Host::bind_into`]).
    pub fn bind_into(&self, pid: u32, mounts: &[(&Path, &Path)]) -> std::io::Result<()> {
        match &self.host {
            Some(host) => host.bind_into(pid, mounts),
            None => Err(std::io::Error::other("no mount namespaces on this machine")),
        }
    }

    /// The variables a dependency install gets besides the fresh environment.
    pub fn build_variables() -> impl Iterator<Item = (String, String)> {
        // The proxy variables are the egress proxy's (set by `confine`): an operator's
        // own HTTP(S)_PROXY would bypass the policy, and is not passed on.
        Runtime::ALL
            .iter()
            .flat_map(|r| r.descriptor().build_variables)
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
    }

    fn ruleset(&self, confinement: &Confinement<'_>) -> Result<RulesetCreated, RulesetError> {
        let read = AccessFs::from_read(ABI_WANTED);
        let all = AccessFs::from_all(ABI_WANTED);
        let devices = AccessFs::ReadFile | AccessFs::WriteFile;
        // No rule grants a TCP bind (Landlock ABI 4+): instances serve on the socket
        // sless hands them.
        Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)?
            .handle_access(AccessNet::BindTcp)?
            .scope(Scope::from_all(ABI_WANTED))?
            .create()?
            .add_rules(path_beneath_rules(&self.shared_read, read))?
            .add_rules(path_beneath_rules(confinement.read, read))?
            .add_rules(path_beneath_rules(DEVICES, devices))?
            .add_rules(path_beneath_rules(confinement.write, all))
    }
}

/// Full when the kernel has Landlock and the namespaces could be made; else what the
/// operator allowed, with every missing mechanism named.
fn enforcement(abi: Result<i32, String>, namespaces: Option<&String>, allow: bool) -> Enforcement {
    let landlock = match abi {
        Ok(version) if version >= 1 => None,
        Ok(version) => Some(format!("no Landlock: ABI {version}")),
        Err(why) => Some(format!("no Landlock: {why}")),
    };
    let namespaces = namespaces.map(|why| format!("no network and mount namespaces: {why}"));
    let missing: Vec<String> = landlock.into_iter().chain(namespaces).collect();
    match (missing.is_empty(), allow) {
        (true, _) => Enforcement::Full,
        (false, true) => Enforcement::Unsandboxed(missing.join("; ")),
        (false, false) => Enforcement::Refused(missing.join("; ")),
    }
}

/// The kernel's Landlock ABI version, or why there is none.
fn landlock_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the documented version query: no ruleset pointer, size 0.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version >= 0 {
        return i32::try_from(version).map_err(|e| e.to_string());
    }
    Err(match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => "Landlock is built in but not enabled at boot".into(),
        Some(libc::ENOSYS) => "the kernel is built without Landlock".into(),
        _ => std::io::Error::last_os_error().to_string(),
    })
}

fn restrict(ruleset: RulesetCreated) -> std::io::Result<()> {
    match ruleset.restrict_self() {
        Ok(RestrictionStatus {
            ruleset: RulesetStatus::NotEnforced,
            ..
        }) => Err(std::io::Error::other("Landlock was not enforced")),
        Ok(_) => Ok(()),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// Adds a Landlock rule granting `access` beneath `path` to the ruleset `ruleset`, in
/// the child: open, landlock_add_rule and close only.
fn allow_beneath(ruleset: RawFd, path: &CStr, access: u64) -> std::io::Result<()> {
    #[repr(C, packed)]
    struct PathBeneathAttr {
        allowed_access: u64,
        parent_fd: i32,
    }
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    // SAFETY: a NUL-terminated path, an attribute struct on the stack as the kernel
    // defines it; the descriptor is closed before returning.
    unsafe {
        let dir = libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: access,
            parent_fd: dir,
        };
        let added = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        );
        let error = std::io::Error::last_os_error();
        libc::close(dir);
        if added != 0 {
            return Err(error);
        }
    }
    Ok(())
}

/// Sets a resource limit of another process (lowering it needs no privilege).
fn set_rlimit(
    pid: u32,
    resource: libc::__rlimit_resource_t,
    limit: libc::rlimit,
) -> std::io::Result<()> {
    // SAFETY: prlimit reads the limit from a local and writes nothing back (null).
    let set = unsafe { libc::prlimit(pid as libc::pid_t, resource, &limit, std::ptr::null_mut()) };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn no_new_privs() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Root without capabilities: the bounding and ambient sets emptied, then the
/// effective, permitted and inheritable sets, so exec gives none back.
fn drop_all_capabilities() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl and capset on the calling process with valid pointers to locals.
    unsafe {
        for cap in 0..64 {
            // EINVAL past the kernel's last capability is expected.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The installation directory of a tool found on `path` (`/usr/bin/node` → `/usr`,
/// `~/.pyenv/shims/python3` → `~/.pyenv`), unless it would hold the data dir.
fn install_root(tool: &str, path: &str, data_dir: &Path) -> Option<PathBuf> {
    let found = if tool.contains('/') {
        PathBuf::from(tool)
    } else {
        std::env::split_paths(path)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())?
    };
    let real = std::fs::canonicalize(found).ok()?;
    let bin = real.parent()?;
    [bin.parent(), Some(bin)]
        .into_iter()
        .flatten()
        .find(|root| *root != Path::new("/") && !data_dir.starts_with(root))
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_landlock_or_namespaces_functions_are_refused_unless_allowed() {
        assert_eq!(enforcement(Ok(7), None, false), Enforcement::Full);
        assert!(matches!(
            enforcement(Err("no".into()), None, false),
            Enforcement::Refused(_)
        ));
        assert!(matches!(
            enforcement(Ok(0), None, true),
            Enforcement::Unsandboxed(_)
        ));
        let userns = "unshare: EPERM".to_string();
        assert_eq!(
            enforcement(Ok(7), Some(&userns), false),
            Enforcement::Refused("no network and mount namespaces: unshare: EPERM".into())
        );
        assert!(matches!(
            enforcement(Ok(7), Some(&userns), true),
            Enforcement::Unsandboxed(why) if why.contains("namespaces")
        ));
        let message = SandboxError::Unsupported("x".into()).to_string();
        assert!(message.contains("--allow-unsandboxed"), "{message}");
        assert!(message.contains("SLESS_ALLOW_UNSANDBOXED=1"), "{message}");
    }

    #[test]
    fn install_roots_never_cover_the_data_dir() {
        let data = Path::new("/srv/sless");
        assert_eq!(
            install_root("/usr/bin/env", "", data),
            Some(PathBuf::from("/usr"))
        );
        assert_eq!(
            install_root("/usr/bin/env", "", Path::new("/usr/x")),
            Some(PathBuf::from("/usr/bin"))
        );
    }
}

//! The namespaces a confined process enters between fork and exec. Its own mount
//! namespace: sless's run directory (where instances' sockets live) hidden under an
//! empty tmpfs, and its scratch directory a size-limited tmpfs of its own. Its own
//! network namespace when asked: only `lo`, so nothing it binds or listens on is
//! reachable from the host or other tenants, and the host's loopback (sless's API, S3,
//! other instances) is not reachable from it. As an ordinary user a user namespace comes
//! first, mapping only the user's own uid and gid.
//!
//! The child may only make async-signal-safe calls: every string is prepared here
//! before the fork, [`Namespaces::enter`] makes system calls and allocates nothing.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What every process's namespaces share on this machine; decided at start.
#[derive(Debug, Clone)]
pub struct Host {
    /// `<data_dir>/run`, hidden from every process.
    run_dir: CString,
    uid: libc::uid_t,
    gid: libc::gid_t,
    /// Not root: a user namespace gives the rights to make the others.
    user_namespace: bool,
}

/// One process's namespaces, ready to enter in its child.
#[derive(Debug)]
pub struct Namespaces {
    /// `uid_map` and `gid_map` lines, when entering a user namespace.
    maps: Option<(CString, CString)>,
    network: bool,
    hide: CString,
    scratch: Option<Scratch>,
}

#[derive(Debug)]
struct Scratch {
    target: CString,
    options: CString,
}

impl Host {
    /// The run directory is created (empty, private) so it can be mounted over.
    pub fn new(run_dir: &Path) -> io::Result<Self> {
        sless_core::data_dir::create_private_dir(run_dir)?;
        // SAFETY: getters without preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Ok(Self {
            run_dir: c_path(run_dir)?,
            uid,
            gid,
            user_namespace: uid != 0,
        })
    }

    /// The namespaces of one process: a network namespace when `network`, a tmpfs of
    /// `disk_mb` on `scratch` when given.
    pub fn namespaces(
        &self,
        network: bool,
        scratch: Option<(&Path, u32)>,
    ) -> io::Result<Namespaces> {
        let maps = match self.user_namespace {
            true => Some((id_map(self.uid)?, id_map(self.gid)?)),
            false => None,
        };
        let scratch = scratch
            .map(|(dir, mb)| {
                Ok::<_, io::Error>(Scratch {
                    target: c_path(dir)?,
                    options: CString::new(format!(
                        "size={mb}m,mode=0700,uid={},gid={}",
                        self.uid, self.gid
                    ))?,
                })
            })
            .transpose()?;
        Ok(Namespaces {
            maps,
            network,
            hide: self.run_dir.clone(),
            scratch,
        })
    }

    /// Whether this machine lets sless make the namespaces: a child enters all of them
    /// (network on, a scratch tmpfs on the run dir) and runs `true`. The error says
    /// which mechanism failed and, for an ordinary user, the kernel settings to check.
    pub fn probe(&self) -> Result<(), String> {
        let run_dir = Path::new(std::ffi::OsStr::from_bytes(self.run_dir.as_bytes()));
        let namespaces = self
            .namespaces(true, Some((run_dir, 1)))
            .map_err(|e| e.to_string())?;
        let mut command = std::process::Command::new("true");
        // SAFETY: enter makes only async-signal-safe system calls on prepared data.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || namespaces.enter());
        }
        let why = match command.status() {
            Ok(status) if status.success() => return Ok(()),
            Ok(status) => format!("a probe in the namespaces exited with {status}"),
            Err(e) => format!(
                "cannot make {} namespaces: {e}",
                if self.user_namespace {
                    "user, mount and network"
                } else {
                    "mount and network"
                }
            ),
        };
        match self.user_namespace.then(user_namespace_policy).flatten() {
            Some(policy) => Err(format!("{why} ({policy})")),
            None => Err(why),
        }
    }
}

impl Host {
    /// Bind-mounts each `(source, target)` into the mount namespace of `pid` (a process
    /// sless confined; a standby bound to a function, [`crate::standby`]): `source` is a
    /// path as sless sees it, `target` one in the process's view (made if missing).
    /// setns into a user namespace needs a single-threaded process, hence a short
    /// helper child that joins them before it execs `true`.
    pub fn bind_into(&self, pid: u32, mounts: &[(&Path, &Path)]) -> io::Result<()> {
        let user = self
            .user_namespace
            .then(|| CString::new(format!("/proc/{pid}/ns/user")))
            .transpose()?;
        let mount_ns = CString::new(format!("/proc/{pid}/ns/mnt"))?;
        let mounts = mounts
            .iter()
            .map(|(source, target)| Ok((c_path(source)?, c_path(target)?)))
            .collect::<io::Result<Vec<_>>>()?;
        let mut command = std::process::Command::new("true");
        command.env_clear().env("PATH", "/usr/bin:/bin");
        // SAFETY: open, setns, mount and close on strings prepared before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                if let Some(user) = &user {
                    join(user, libc::CLONE_NEWUSER)?;
                }
                join(&mount_ns, libc::CLONE_NEWNS)?;
                for (source, target) in &mounts {
                    // A mount point in the standby's tmpfs is made here.
                    if libc::mkdir(target.as_ptr(), 0o700) != 0
                        && *libc::__errno_location() != libc::EEXIST
                    {
                        return Err(io::Error::last_os_error());
                    }
                    check(libc::mount(
                        source.as_ptr(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                }
                Ok(())
            });
        }
        let status = command.status()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "the mount helper exited with {status}"
            )));
        }
        Ok(())
    }
}

/// # Safety
/// Async-signal-safe: open, setns and close only.
unsafe fn join(path: &CStr, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the descriptor is closed before returning.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        check(fd)?;
        let joined = libc::setns(fd, kind);
        let error = io::Error::last_os_error();
        libc::close(fd);
        if joined != 0 {
            return Err(error);
        }
    }
    Ok(())
}

impl Namespaces {
    /// The directory its scratch tmpfs is mounted on, if any.
    pub fn scratch(&self) -> Option<&CStr> {
        self.scratch.as_ref().map(|s| s.target.as_c_str())
    }

    /// Enters the namespaces; runs in the forked child before exec.
    pub fn enter(&self) -> io::Result<()> {
        let mut flags = libc::CLONE_NEWNS;
        if self.network {
            flags |= libc::CLONE_NEWNET;
        }
        if self.maps.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        // SAFETY: unshare, open/write/close, mount, socket and ioctl are
        // async-signal-safe; every pointer is to a string prepared before the fork.
        unsafe {
            check(libc::unshare(flags))?;
            if let Some((uid_map, gid_map)) = &self.maps {
                // sless is not dumpable, so its /proc files are root's: the child may
                // write its own maps only while dumpable (exec makes it dumpable anyway).
                check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0))?;
                // gid_map may be written by an unprivileged user only after setgroups is denied.
                write_file(c"/proc/self/setgroups", c"deny")?;
                write_file(c"/proc/self/uid_map", uid_map)?;
                write_file(c"/proc/self/gid_map", gid_map)?;
                check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
            }
            // Nothing mounted here propagates back to the host.
            check(libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"tmpfs".as_ptr(),
                self.hide.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"size=4k,mode=0500".as_ptr().cast(),
            ))?;
            if let Some(scratch) = &self.scratch {
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    scratch.target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    scratch.options.as_ptr().cast(),
                ))?;
            }
            if self.network {
                loopback_up()?;
            }
        }
        Ok(())
    }
}

/// `<id> <id> 1`: the user's own id, the only one an unprivileged user may map.
fn id_map(id: u32) -> Result<CString, std::ffi::NulError> {
    CString::new(format!("{id} {id} 1"))
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// # Safety
/// Async-signal-safe: open, write and close only.
unsafe fn write_file(path: &CStr, data: &CStr) -> io::Result<()> {
    // SAFETY: valid NUL-terminated strings; the descriptor is closed before returning.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd)?;
        let bytes = data.to_bytes();
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if usize::try_from(written).ok() != Some(bytes.len()) {
            return Err(error);
        }
    }
    Ok(())
}

/// A new network namespace has `lo` down: bring it up so the process can talk to itself.
///
/// # Safety
/// Async-signal-safe: socket, ioctl and close only.
unsafe fn loopback_up() -> io::Result<()> {
    // SAFETY: ifreq is plain data; the ioctl reads the struct we own.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        check(fd)?;
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo") {
            *to = *from as libc::c_char;
        }
        request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let result = libc::ioctl(fd, libc::SIOCSIFFLAGS, &request);
        let error = io::Error::last_os_error();
        libc::close(fd);
        if result < 0 {
            return Err(error);
        }
    }
    Ok(())
}

/// The kernel settings that refuse unprivileged user namespaces, when one does.
fn user_namespace_policy() -> Option<String> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|v| v.trim().to_string())
    };
    [
        ("/proc/sys/user/max_user_namespaces", "0"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
        ),
    ]
    .into_iter()
    .find(|(path, refusing)| read(path).as_deref() == Some(refusing))
    .map(|(path, value)| {
        let name = path.trim_start_matches("/proc/sys/").replace('/', ".");
        format!("{name} is {value}: unprivileged user namespaces are disabled by policy")
    })
}

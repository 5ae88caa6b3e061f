//! The host's side of a kept guest: boots the loop (`script`) through virtiofs as any boot
//! (`vng::run`, on this thread, so that the VM dies with this process even by SIGKILL,
//! `support::proc`), and serves the runs that ask on the checkout's socket (`wire`), one at a
//! time, on another thread.
//!
//! A run is let in only after a check: the guest records its state, the keeper reads it and the
//! kernel log since the last check, and the judgement it was handed (`results::freshness`)
//! finds nothing. Anything else refuses the run (it boots afresh and says why) and stops the
//! guest, which boots again once that run has let go of the socket. So does a run that ends
//! any other way than its script's end (its command killed, its time limit, the VM's death).
//! The keeper ends on Ctrl-C, when no run asked for `idle`, or when its guest fails to boot.
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::machine::guest::files::KERNEL_LOG;
use crate::machine::vng::{self, Input, RunOutcome, VmSpec, STATUS_FILE};
use crate::machine::warm_guest::key::Key;
use crate::machine::warm_guest::script::{self, end_marker, BOOT_STATE, KMSG_LOG, SAYS};
use crate::machine::warm_guest::wire::{self, Ended, Reply, Request, Run, Stream, WireEnding};
use crate::support::guest_files;
use crate::support::output::{Events, Output};
use crate::support::proc;

/// What one check gives the judgement: the guest's records and its kernel log since the last
/// check (`results::freshness::Evidence` reads the same).
pub struct Check<'a> {
    pub boot: &'a str,
    pub now: &'a str,
    pub log: &'a str,
    pub after: Option<u64>,
    pub log_bytes: u64,
}

/// The judgement of a check: the reasons to boot afresh, none to use the guest.
pub type Judge = Box<dyn Fn(&Check) -> Vec<String> + Send + Sync>;

/// A keeper's VM and rules.
pub struct Keeper {
    /// The loop's VM: its `rwdir` is the share, its `script` the loop (written here).
    pub spec: VmSpec,
    pub vng: PathBuf,
    pub path_prefix: Vec<PathBuf>,
    pub key: Key,
    /// Stop after this long without a run.
    pub idle: Duration,
    pub judge: Judge,
}

/// The kept guest's key, as JSON, in its directory.
pub const KEY_FILE: &str = "key.json";

/// How long a guest may take to answer a check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a run waits for a guest that is booting.
const BOOT_WAIT: Duration = Duration::from_secs(180);
/// Console lines kept for a run's diagnosis.
const TAIL: usize = 60;
/// How long the guest may take to settle after a run (its settle step waits 3 s at most).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopped guest's VM may take to go.
const STOP_WAIT: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Guest {
    /// The guest said `ready`: its boot's record is written.
    ready: bool,
    /// vng returned: how the VM ended.
    down: Option<RunOutcome>,
    /// The guest's `bpfvm-warm:` lines not yet taken.
    says: VecDeque<String>,
    /// Where the guest's other output goes while a run uses it.
    sink: Option<UnixStream>,
    tail: VecDeque<String>,
    /// A run is connected: the guest is not booted again until it lets go.
    busy: bool,
    /// The keeper is ending.
    quit: bool,
    last_run: Option<Instant>,
    /// Which boot this is (from 1), and since when it runs.
    boot: u64,
    up_since: Option<Instant>,
}

struct Shared {
    guest: Mutex<Guest>,
    changed: Condvar,
    stop: Arc<AtomicBool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Guest> {
        self.guest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `done` holds or `limit` passed; returns the guard and whether it holds.
    fn wait_for<'a>(
        &'a self,
        limit: Duration,
        mut done: impl FnMut(&mut Guest) -> bool,
    ) -> (MutexGuard<'a, Guest>, bool) {
        let deadline = Instant::now() + limit;
        let mut g = self.lock();
        loop {
            if done(&mut g) {
                return (g, true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (g, false);
            }
            g = self
                .changed
                .wait_timeout(g, left.min(Duration::from_millis(100)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn stop_vm(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Runs the keeper until Ctrl-C, `idle` without a run, or a boot that fails (an error).
/// `dir` is the checkout's kept-guest directory (`wire::dir`), locked for the keeper's life.
pub fn serve(mut k: Keeper, dir: &Path, events: &Events) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let _lock = lock(&dir.join(wire::LOCK))?;
    let socket = dir.join(wire::SOCKET);
    let _ = std::fs::remove_file(&socket);
    let listener =
        UnixListener::bind(&socket).with_context(|| format!("listen on {}", socket.display()))?;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    k.spec.stop = Some(stop.clone());
    k.spec.input = Some(Input::default());
    let shared = Arc::new(Shared {
        guest: Mutex::new(Guest::default()),
        changed: Condvar::new(),
        stop,
    });
    // What the guest boots, for a reader (and a hand-made run: docs/warm-guest.md).
    crate::support::fs::write_atomic(&dir.join(KEY_FILE), wire::line(&k.key).as_bytes())?;
    let k = Arc::new(k);
    let server = {
        let (shared, k, events) = (shared.clone(), k.clone(), events.clone());
        std::thread::spawn(move || accept(listener, &shared, &k, &events))
    };
    let result = keep(&k, &shared, events);
    shared.lock().quit = true;
    shared.changed.notify_all();
    let _ = server.join();
    let _ = std::fs::remove_file(&socket);
    result
}

/// Boots the guest, again after each stop, until the keeper ends.
fn keep(k: &Keeper, shared: &Arc<Shared>, events: &Events) -> Result<()> {
    let share = k.spec.rwdir.clone();
    for boot in 1.. {
        {
            // A run that is still connected (refused, booting its own VM) goes first.
            let mut g = loop {
                let (g, free) = shared.wait_for(Duration::from_secs(3600), |g| !g.busy || g.quit);
                if free {
                    break g;
                }
            };
            if g.quit || proc::interrupted() {
                return Ok(());
            }
            *g = Guest {
                last_run: g.last_run,
                boot,
                up_since: Some(Instant::now()),
                ..Guest::default()
            };
        }
        shared.stop.store(false, Ordering::SeqCst);
        fresh_share(&share)?;
        std::fs::write(&k.spec.script, script::loop_script(&share, k.spec.arch))
            .with_context(|| format!("write {}", k.spec.script.display()))?;
        events.step(format!("booting the kept guest (boot {boot})"));
        let started = Instant::now();
        let route = route(shared.clone(), events.clone());
        let outcome = vng::run(&k.spec, &k.vng, &k.path_prefix, &route)?;
        let was_ready;
        {
            let mut g = shared.lock();
            was_ready = g.ready;
            g.ready = false;
            g.down = Some(outcome.clone());
            if proc::interrupted() {
                g.quit = true;
            }
            shared.changed.notify_all();
        }
        if shared.lock().quit {
            events.note("the kept guest is stopped");
            return Ok(());
        }
        if !was_ready {
            bail!(
                "the kept guest did not come up ({:.1} s): {}",
                started.elapsed().as_secs_f64(),
                outcome.diagnosis()
            );
        }
        let why = match shared.stop.load(Ordering::SeqCst) {
            true => "stopped by its keeper".to_string(),
            false => outcome
                .diagnosis()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        events.note(format!(
            "the kept guest stopped after {:.0} s: {why}",
            started.elapsed().as_secs_f64(),
        ));
    }
    unreachable!("the loop ends by returning")
}

/// The guest's output during a boot: its `bpfvm-warm:` lines to the run being served, the
/// rest to the run using the guest if any, else to the keeper's own events.
fn route(shared: Arc<Shared>, events: Events) -> Events {
    Events::new(move |o| {
        let (stream, text) = match &o {
            Output::GuestStdout(l) if l.starts_with(SAYS) => {
                let said = l[SAYS.len()..].to_string();
                let mut g = shared.lock();
                if said == "ready" {
                    g.ready = true;
                    events.note(format!(
                        "the kept guest is up (boot {}, {:.1} s)",
                        g.boot,
                        g.up_since.map_or(0.0, |t| t.elapsed().as_secs_f64())
                    ));
                }
                g.says.push_back(said);
                shared.changed.notify_all();
                return;
            }
            Output::GuestStdout(l) => (Stream::Stdout, l.clone()),
            Output::GuestStderr(l) => (Stream::Stderr, l.clone()),
            Output::Console(l) => (Stream::Console, l.clone()),
            _ => return events.emit(o),
        };
        let mut g = shared.lock();
        if stream == Stream::Console {
            if g.tail.len() == TAIL {
                g.tail.pop_front();
            }
            g.tail.push_back(text.clone());
        }
        let sent = match &mut g.sink {
            Some(s) => s
                .write_all(wire::line(&Reply::Line { stream, text }).as_bytes())
                .is_ok(),
            None => {
                drop(g);
                return events.emit(o);
            }
        };
        if !sent {
            g.sink = None;
        }
    })
}

/// Empties the share for a new boot: the last boot's records, runs left behind.
fn fresh_share(share: &Path) -> Result<()> {
    if share.exists() {
        std::fs::remove_dir_all(share).with_context(|| format!("empty {}", share.display()))?;
    }
    std::fs::create_dir_all(share).with_context(|| format!("create {}", share.display()))
}

/// Takes the keeper's lock, or says another keeper holds it.
fn lock(path: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    // SAFETY: flock on a file we hold open.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!(
            "a kept guest already runs for this checkout ({} is locked); one a checkout",
            path.display()
        );
    }
    Ok(f)
}

/// Takes runs one at a time until the keeper ends; stops the guest after `idle` without one.
fn accept(listener: UnixListener, shared: &Shared, k: &Keeper, events: &Events) {
    let since = Instant::now();
    let mut counter = Counter::default();
    loop {
        {
            let g = shared.lock();
            if g.quit {
                return;
            }
            let last = g.last_run.unwrap_or(since);
            if g.ready && last.elapsed() > k.idle {
                drop(g);
                events.note(format!(
                    "no run for {} min: stopping the kept guest",
                    k.idle.as_secs() / 60
                ));
                shared.lock().quit = true;
                shared.stop_vm();
                return;
            }
        }
        if proc::interrupted() {
            shared.stop_vm();
            return;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                shared.lock().busy = true;
                let _ = stream.set_nonblocking(false);
                if let Err(e) = serve_run(stream, shared, k, &mut counter, events) {
                    events.warn(format!("a run of the kept guest: {e:#}"));
                }
                let mut g = shared.lock();
                g.busy = false;
                g.sink = None;
                g.last_run = Some(Instant::now());
                shared.changed.notify_all();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                events.warn(format!("the kept guest's socket: {e}"));
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Where the checks of the current boot are: the next check's number, the byte of the kernel
/// log copy after the last check and the seq of its marker, and the runs served since the boot.
#[derive(Default)]
struct Counter {
    boot: u64,
    up_since: Option<Instant>,
    next: u64,
    from: u64,
    after: Option<u64>,
    runs: u64,
}

fn send(stream: &mut UnixStream, reply: &Reply) -> Result<()> {
    stream
        .write_all(wire::line(reply).as_bytes())
        .context("write to the run")
}

/// Serves one run: its question, the check, the run's script, the run itself.
fn serve_run(
    mut stream: UnixStream,
    shared: &Shared,
    k: &Keeper,
    counter: &mut Counter,
    events: &Events,
) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    // One reader for the connection: a run may send both of its lines at once.
    let mut lines = BufReader::new(stream.try_clone()?);
    let mut line = Vec::new();
    (&mut lines)
        .take(1 << 20)
        .read_until(b'\n', &mut line)
        .context("read the run's question")?;
    let req: Request = serde_json::from_slice(&line).context("read the run's question")?;
    // A refusal is said at once (the run reads it once built); a use only once the run says
    // what it runs, the guest held for it meanwhile.
    let (n, marker_seq, end) = match check_guest(&req, shared, k, counter) {
        Ok(checked) => checked,
        Err(refusal) => return refuse(stream, lines, refusal, shared, events),
    };
    let Some(run) = wait_for_run(&mut lines, shared)? else {
        // The run ended while it built (a failed build, Ctrl-C): nothing ran in the guest.
        return Ok(());
    };
    if shared.lock().down.is_some() {
        let why = "the kept guest stopped after its check".to_string();
        let refusal = Refusal { why, stop: false };
        return refuse(stream, lines, refusal, shared, events);
    }
    let asked = Instant::now();
    counter.from = end;
    counter.after = Some(marker_seq);
    let because = format!(
        "the kept guest (up {:.0} s, {} runs before this one) is as its boot left it: the \
         same release, taint, sysctls, module parameters, cgroups, tracefs, root network \
         namespace and files, no BPF object, pin, module, mount or process left or gone, no \
         splat or lost record in its kernel log since the last check",
        counter.up_since.map_or(0.0, |b| b.elapsed().as_secs_f64()),
        counter.runs
    );
    counter.runs += 1;
    {
        let mut g = shared.lock();
        g.tail.clear();
        g.sink = Some(stream.try_clone()?);
    }
    send(
        &mut stream,
        &Reply::Using {
            why: because,
            after: marker_seq,
        },
    )?;
    let share = &k.spec.rwdir;
    let go = format!("go.{n} {marker_seq} {} {}", end + 1, run.script.display());
    say(&k.spec.input, &go)?;
    events.note(format!(
        "run {} of boot {}: using the kept guest",
        counter.runs, counter.boot
    ));
    let Some((ending, start)) = watch_run(&stream, &run, shared, n, asked)? else {
        events.warn("the run let go of the kept guest before its end: stopping the guest");
        shared.stop_vm();
        if run.shared.starts_with(share) {
            if let Some(run_dir) = run.shared.parent() {
                let _ = std::fs::remove_dir_all(run_dir);
            }
        }
        return Ok(());
    };
    let served = Served {
        n,
        from: end,
        after: marker_seq,
        asked,
        start,
    };
    finish_run(stream, &run, ending, served, shared, k, events)
}

/// Where a run that was let in stands: its check's number, the byte of the kernel log copy
/// after that check and the seq of its marker, when the keeper handed it over and when the
/// guest started it.
struct Served {
    n: u64,
    from: u64,
    after: u64,
    asked: Instant,
    start: Option<Instant>,
}

/// Ends a run that ended `ending`: settles the guest after it (or stops the guest), writes
/// its kernel log whole from the guest's copy, tells it how it ended and, when the guest
/// stopped, holds the share (the keeper's next boot empties it) until the run lets go.
fn finish_run(
    mut stream: UnixStream,
    run: &Run,
    ending: WireEnding,
    Served {
        n,
        from,
        after,
        asked,
        start,
    }: Served,
    shared: &Shared,
    k: &Keeper,
    events: &Events,
) -> Result<()> {
    let now = Instant::now();
    // The script ended: the kernel's deferred work since its last phase is this run's too.
    let settled = matches!(ending, WireEnding::Exited(_)) && settle(k, shared, n);
    // Whatever ended the run otherwise (a panic, its time limit, a guest that did not settle)
    // leaves no guest to reuse.
    let stopped = !settled;
    if stopped {
        shared.stop_vm();
        drop(shared.wait_for(STOP_WAIT, |g| g.down.is_some()));
    }
    let mut g = shared.lock();
    g.sink = None;
    let console_tail = match &g.down {
        Some(down) => down.console_tail.clone(),
        None => g.tail.iter().cloned().collect(),
    };
    drop(g);
    let to = settled.then(|| end_marker(n));
    let kmsg = k.spec.rwdir.join(KMSG_LOG);
    if let Err(e) = run_log(&kmsg, from, after, to.as_deref(), &run.shared) {
        events.warn(format!(
            "the run's kernel log from the kept guest's copy: {e:#}"
        ));
    }
    let ended = Ended {
        ending,
        console_tail,
        elapsed_s: asked.elapsed().as_secs_f64(),
        boot_s: start.map(|s| s.duration_since(asked).as_secs_f64()),
        guest_s: start.map(|s| now.duration_since(s).as_secs_f64()),
    };
    send(&mut stream, &Reply::Ended(ended))?;
    if stopped {
        // The share is emptied for the next boot only once the run has read its files.
        hold_until_gone(&stream)?;
    }
    Ok(())
}

/// Asks the guest to settle after run `n` (its kernel's deferred work) and to mark the end
/// of the run's kernel log (`script::end_marker`); whether it said so in time.
fn settle(k: &Keeper, shared: &Shared, n: u64) -> bool {
    if say(&k.spec.input, &format!("end.{n}")).is_err() {
        return false;
    }
    let settled = format!("settled {n}");
    let (g, answered) = shared.wait_for(SETTLE_TIMEOUT, |g| {
        take(&mut g.says, &settled) || g.down.is_some()
    });
    answered && g.down.is_none()
}

/// Writes the run's kernel log (`kernel.log` in `shared`) from the guest's running copy at
/// `kmsg`: from byte `from` (the one after the check that let it in, whose marker's seq is
/// `after`) to the record `to` (the marker the guest wrote once it settled after the run)
/// or, for a guest that stopped, to the copy's end. The run's own copy stopped at its
/// script's last phase, or at whatever byte its `tail` had reached when the VM stopped.
fn run_log(kmsg: &Path, from: u64, after: u64, to: Option<&str>, shared: &Path) -> Result<()> {
    let text = match to {
        Some(marker) => log_to_marker(kmsg, from, marker)?.0,
        None => {
            let bytes = std::fs::read(kmsg).with_context(|| format!("read {}", kmsg.display()))?;
            let rest = bytes.get(from as usize..).unwrap_or_default();
            String::from_utf8_lossy(rest).into_owned()
        }
    };
    let log = format!("bpfvm: continues after seq {after}\n{text}");
    if log.len() as u64 > guest_files::MAX_FILE {
        bail!(
            "{} bytes since the run's check, more than a run's kernel log may hold: its own copy \
             stays",
            log.len()
        );
    }
    crate::support::fs::write_atomic(&shared.join(KERNEL_LOG), log.as_bytes())
}

/// Waits for the run on `stream` to let go of it (its end of file): it reads its files in
/// the share until then.
fn hold_until_gone(stream: &UnixStream) -> Result<()> {
    let mut s = stream.try_clone()?;
    s.set_read_timeout(None)?;
    let _ = std::io::copy(&mut s, &mut std::io::sink());
    Ok(())
}

/// Refuses the run on `stream`, stopping the guest when the refusal says so; returns when the
/// run lets go of the socket (the run boots its own VM meanwhile, and this guest boots again
/// only after it).
fn refuse(
    mut stream: UnixStream,
    mut lines: BufReader<UnixStream>,
    Refusal { why, stop }: Refusal,
    shared: &Shared,
    events: &Events,
) -> Result<()> {
    events.note(format!("a run refused: {why}"));
    if stop {
        shared.stop_vm();
    }
    send(&mut stream, &Reply::Refused(why))?;
    stream.set_read_timeout(None)?;
    // To its end of file, past the run's `Run` line.
    let _ = std::io::copy(&mut lines, &mut std::io::sink());
    Ok(())
}

/// The run's [`Run`] line, read while it builds; `None` at its end of file, or when the keeper
/// ends first.
fn wait_for_run(lines: &mut BufReader<UnixStream>, shared: &Shared) -> Result<Option<Run>> {
    lines
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut line = Vec::new();
    loop {
        if proc::interrupted() || shared.lock().quit {
            return Ok(None);
        }
        match lines.take(1 << 20).read_until(b'\n', &mut line) {
            Ok(0) => return Ok(None),
            Ok(_) if line.ends_with(b"\n") => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("read what the run runs"),
        }
    }
    let run = serde_json::from_slice(&line).context("read what the run runs")?;
    Ok(Some(run))
}

/// Why a run may not use the kept guest, and whether the guest must stop for it.
struct Refusal {
    why: String,
    stop: bool,
}

/// Whether the kept guest may serve `req`: the same key, up, answering its check, its kernel
/// log readable to the check's marker and its state as its boot left it. Returns the check's
/// number, the marker's sequence number and where the log read ended.
fn check_guest(
    req: &Request,
    shared: &Shared,
    k: &Keeper,
    counter: &mut Counter,
) -> std::result::Result<(u64, u64, u64), Refusal> {
    let refuse = |why: String, stop: bool| Refusal { why, stop };
    let differs = req.key.differences(&k.key);
    if !differs.is_empty() {
        let why = format!("the kept guest boots another VM: {}", differs.join("; "));
        return Err(refuse(why, false));
    }
    let (g, _) = shared.wait_for(BOOT_WAIT, |g| g.ready || g.down.is_some() || g.quit);
    if !g.ready {
        return Err(refuse("the kept guest is not up".into(), false));
    }
    if counter.boot != g.boot {
        *counter = Counter {
            boot: g.boot,
            up_since: g.up_since,
            ..Counter::default()
        };
    }
    drop(g);
    let share = &k.spec.rwdir;
    let n = counter.next;
    counter.next += 1;
    if let Err(e) = say(&k.spec.input, &format!("check.{n}")) {
        return Err(refuse(format!("ask the kept guest to check: {e:#}"), true));
    }
    let checked = format!("checked {n}");
    let (g, answered) = shared.wait_for(CHECK_TIMEOUT, |g| {
        take(&mut g.says, &checked) || g.down.is_some()
    });
    if !answered || g.down.is_some() {
        let why = format!(
            "the kept guest did not answer its check in {} s",
            CHECK_TIMEOUT.as_secs()
        );
        return Err(refuse(why, true));
    }
    drop(g);
    let marker = script::check_marker(n);
    let (log, marker_seq, end) = log_to_marker(&share.join(KMSG_LOG), counter.from, &marker)
        .map_err(|e| refuse(format!("the kept guest's kernel log: {e:#}"), true))?;
    let read = |name: &str| std::fs::read_to_string(share.join(name)).unwrap_or_default();
    let (boot_state, now_state) = (read(BOOT_STATE), read(&script::state_file(n)));
    let log_bytes = std::fs::metadata(share.join(KMSG_LOG)).map_or(0, |m| m.len());
    let why = (k.judge)(&Check {
        boot: &boot_state,
        now: &now_state,
        log: &log,
        after: counter.after,
        log_bytes,
    });
    if !why.is_empty() {
        let why = format!(
            "the kept guest is not as its boot left it: {}",
            why.join("; ")
        );
        return Err(refuse(why, true));
    }
    Ok((n, marker_seq, end))
}

/// Follows run `n` in the guest to its end: its exit status, the VM's end, or its time limit
/// (counted from `asked`). Returns how it ended and when the guest started it; `None` when
/// the run let go of the socket before its end.
fn watch_run(
    stream: &UnixStream,
    req: &Run,
    shared: &Shared,
    n: u64,
    asked: Instant,
) -> Result<Option<(WireEnding, Option<Instant>)>> {
    // The run lets go of the socket only when it is done: an end of file before is its end.
    let gone = Arc::new(AtomicBool::new(false));
    {
        let (mut r, gone) = (stream.try_clone()?, gone.clone());
        r.set_read_timeout(None)?;
        std::thread::spawn(move || {
            let _ = r.read(&mut [0u8; 1]);
            gone.store(true, Ordering::SeqCst);
        });
    }
    let (started, ended) = (format!("started {n}"), format!("ended {n} "));
    let mut start = None;
    let limit = Duration::from_secs(req.timeout_s);
    loop {
        let (mut g, _) = shared.wait_for(Duration::from_millis(100), |g| {
            !g.says.is_empty() || g.down.is_some()
        });
        while let Some(said) = g.says.pop_front() {
            if said == started {
                start = Some(Instant::now());
            } else if said.starts_with(&ended) {
                let ending = match read_status(&req.shared.join(STATUS_FILE)) {
                    Some(code) => WireEnding::Exited(code),
                    None => WireEnding::VmFailed(format!(
                        "the run's guest script ended ({said}) without writing its exit status"
                    )),
                };
                return Ok(Some((ending, start)));
            }
        }
        if let Some(down) = &g.down {
            return Ok(Some((WireEnding::from(&down.ending), start)));
        }
        drop(g);
        if gone.load(Ordering::SeqCst) {
            return Ok(None);
        }
        if asked.elapsed() > limit {
            shared.stop_vm();
            return Ok(Some((WireEnding::Timeout(req.timeout_s), start)));
        }
    }
}

/// Whether `says` holds `word`; takes it (and what came before it) if so.
fn take(says: &mut VecDeque<String>, word: &str) -> bool {
    match says.iter().position(|s| s == word) {
        Some(i) => {
            says.drain(..=i);
            true
        }
        None => false,
    }
}

/// The guest's exit status file, as `vng::run` reads it.
fn read_status(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Says `words` to the guest, a line on its loop's stdin (`VmSpec::input`): the loop waits in
/// a blocking read, so an idle guest polls nothing and wakes at once.
fn say(input: &Option<Input>, words: &str) -> Result<()> {
    let input = input.as_ref().context("the kept guest has no input")?;
    let mut held = input.lock().unwrap_or_else(|e| e.into_inner());
    let w = held
        .as_mut()
        .context("the kept guest's VM is not running")?;
    w.write_all(format!("{words}\n").as_bytes())
        .and_then(|()| w.flush())
        .context("tell the kept guest")
}

/// The kernel log copy at `path` from byte `from` to the end of check `n`'s marker (waiting
/// up to 10 s for it to be copied): that text, the marker's seq and the byte after it.
fn log_to_marker(path: &Path, from: u64, marker: &str) -> Result<(String, u64, u64)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        let rest = bytes
            .get(from as usize..)
            .context("the copy is shorter than before")?;
        let text = String::from_utf8_lossy(rest);
        if let Some(found) = find_marker(&text, marker) {
            return Ok(found_at(found, from));
        }
        if Instant::now() > deadline {
            bail!("`{marker}` is not in {} after 10 s", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// In a copy of `/dev/kmsg`, the record whose text is `marker`: the text up to and including
/// its line, its seq, and the byte after its line.
fn find_marker(text: &str, marker: &str) -> Option<(String, u64, u64)> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let end = at + line.len();
        let l = line.trim_end_matches('\n');
        if line.ends_with('\n') && l.split_once(';').is_some_and(|(_, t)| t == marker) {
            let seq = l.split(',').nth(1)?.parse().ok()?;
            return Some((text[..end].to_string(), seq, end as u64));
        }
        at = end;
    }
    None
}

fn found_at((text, seq, end): (String, u64, u64), from: u64) -> (String, u64, u64) {
    (text, seq, from + end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared {
            guest: Mutex::new(Guest::default()),
            changed: Condvar::new(),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    fn run_line(script: &str) -> String {
        wire::line(&Run {
            script: script.into(),
            shared: "/s".into(),
            timeout_s: 5,
        })
    }

    /// A run may send its question and its script in one write: the one reader of the
    /// connection reads both, and a run that lets go while it builds runs nothing.
    #[test]
    fn the_runs_script_comes_after_its_question_or_never() {
        let (mut run, keeper) = UnixStream::pair().unwrap();
        let key = Key { parts: vec![] };
        let both = wire::line(&Request { key }) + &run_line("/g.sh");
        run.write_all(both.as_bytes()).unwrap();
        let mut lines = BufReader::new(keeper);
        let mut question = Vec::new();
        lines.read_until(b'\n', &mut question).unwrap();
        assert!(serde_json::from_slice::<Request>(&question).is_ok());
        let got = wait_for_run(&mut lines, &shared()).unwrap().unwrap();
        assert_eq!(got.script, Path::new("/g.sh"));

        let (run, keeper) = UnixStream::pair().unwrap();
        let waiting = std::thread::spawn(move || {
            wait_for_run(&mut BufReader::new(keeper), &shared()).unwrap()
        });
        std::thread::sleep(Duration::from_millis(300));
        drop(run);
        assert!(waiting.join().unwrap().is_none(), "its end of file");
    }

    /// A refusal is said at once, before the run's script; the keeper lets go (and may boot
    /// its guest again) only at the run's end of file, not at its script's line.
    #[test]
    fn a_refusal_is_said_at_once_and_held_to_the_runs_end() {
        let (mut run, keeper) = UnixStream::pair().unwrap();
        let lines = BufReader::new(keeper.try_clone().unwrap());
        let refusal = Refusal {
            why: "a pin left".into(),
            stop: false,
        };
        let events = Events::new(|_| {});
        let held = std::thread::spawn(move || {
            refuse(keeper, lines, refusal, &shared(), &events).unwrap();
        });
        let mut answer = String::new();
        BufReader::new(run.try_clone().unwrap())
            .read_line(&mut answer)
            .unwrap();
        let Reply::Refused(why) = serde_json::from_str(&answer).unwrap() else {
            panic!("{answer}")
        };
        assert_eq!(why, "a pin left");
        run.write_all(run_line("/g.sh").as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(!held.is_finished(), "let go at the script's line");
        drop(run);
        held.join().unwrap();
    }

    #[test]
    fn the_checks_marker_is_found_whole_with_its_seq() {
        let log =
            "6,7,1,-;x\n12,8,2,-;bpfvm: warm check 0\n6,9,3,-;y\n12,10,4,-;bpfvm: warm check 1";
        let (text, seq, end) = find_marker(log, "bpfvm: warm check 0").unwrap();
        assert_eq!(
            (text.as_str(), seq),
            ("6,7,1,-;x\n12,8,2,-;bpfvm: warm check 0\n", 8)
        );
        assert_eq!(&log[end as usize..end as usize + 9], "6,9,3,-;y");
        assert_eq!(
            find_marker(log, "bpfvm: warm check 1"),
            None,
            "not a whole line yet"
        );
        assert_eq!(
            find_marker("12,8,2,-;bpfvm: warm check 10\n", "bpfvm: warm check 1"),
            None
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg.log");
        std::fs::write(&path, log.to_string() + "\n").unwrap();
        let (text, seq, end) = log_to_marker(&path, end, "bpfvm: warm check 1").unwrap();
        assert_eq!(
            (text.as_str(), seq),
            ("6,9,3,-;y\n12,10,4,-;bpfvm: warm check 1\n", 10)
        );
        assert_eq!(end as usize, log.len() + 1);
    }

    /// A kept guest's copy of its kernel log: check 0's marker, a run's records (its last
    /// phase, then a WARN from the kernel's deferred work), the marker the guest wrote once
    /// settled, and what came after.
    const KMSG: &str = "12,8,2,-;bpfvm: warm check 0\n12,9,3,-;bpfvm: phase tests\n\
        12,10,4,-;bpfvm: phase end\n4,11,5,-;------------[ cut here ]------------\n\
        4,12,6,-;WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 f+0x1/0x2\n\
        4,13,7,-;---[ end trace 0000000000000000 ]---\n12,14,8,-;bpfvm: warm end 0\n\
        6,15,9,-;later\n";

    fn keeper(share: &Path) -> Keeper {
        let spec = VmSpec {
            vmlinuz: share.join("vmlinuz"),
            accel: crate::machine::accel::Accel {
                kind: crate::machine::accel::Kind::Tcg,
                reason: "test".into(),
                tcg_thread: None,
            },
            cpus: 2,
            memory: "1G".into(),
            append: vec![],
            rwdir: share.into(),
            script: share.join("loop.sh"),
            timeout: Duration::from_secs(1),
            boot_timeout: Duration::from_secs(1),
            qemu_opts: vec![],
            arch: crate::domain::arch::Arch::host(),
            own_root: None,
            watchdog: None,
            stop: None,
            input: None,
        };
        Keeper {
            spec,
            vng: "/v/vng".into(),
            path_prefix: vec![],
            key: Key { parts: vec![] },
            idle: Duration::from_secs(60),
            judge: Box::new(|_| vec![]),
        }
    }

    /// A run's share as the guest left it: the kept guest's copy of its kernel log, and the
    /// run's own copy, which its `tail` had read to its last phase only.
    fn run_share(share: &Path) -> Run {
        std::fs::write(share.join(KMSG_LOG), KMSG).unwrap();
        let shared = share.join("bpfvm-run-1/shared");
        std::fs::create_dir_all(&shared).unwrap();
        let own = "bpfvm: continues after seq 8\n12,9,3,-;bpfvm: phase tests\n";
        std::fs::write(shared.join(KERNEL_LOG), own).unwrap();
        Run {
            script: share.join("bpfvm-run-1/guest.sh"),
            shared,
            timeout_s: 5,
        }
    }

    /// The run's kernel log is the guest's copy from its check to the marker the guest wrote
    /// once it settled after the run: a WARN after the script's last phase is in it (and so
    /// fails the run), what came after the marker is not.
    #[test]
    fn a_runs_kernel_log_reaches_the_guests_end_marker_after_its_settle() {
        let d = tempfile::tempdir().unwrap();
        let run = run_share(d.path());
        let from = KMSG.find("12,9,").unwrap() as u64;
        let kmsg = d.path().join(KMSG_LOG);
        run_log(&kmsg, from, 8, Some(&end_marker(0)), &run.shared).unwrap();
        let log = std::fs::read_to_string(run.shared.join(KERNEL_LOG)).unwrap();
        assert!(
            log.starts_with("bpfvm: continues after seq 8\n12,9,3,-;"),
            "{log}"
        );
        assert!(
            log.contains(";WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c"),
            "{log}"
        );
        assert!(log.ends_with(";bpfvm: warm end 0\n"), "{log}");
        run_log(&kmsg, from, 8, None, &run.shared).unwrap();
        let log = std::fs::read_to_string(run.shared.join(KERNEL_LOG)).unwrap();
        assert!(
            log.ends_with(";bpfvm: warm end 0\n6,15,9,-;later\n"),
            "to the copy's end"
        );
    }

    /// A run whose guest stopped with it (its time limit, here) is told how it ended with its
    /// kernel log whole (not the part its `tail` had copied), and the keeper, which empties
    /// the share before its next boot, does not go on until the run has let go of the socket:
    /// the run reads its kernel log there after its end.
    #[test]
    fn a_guest_stopped_with_its_run_keeps_the_share_until_the_run_has_read_it() {
        let d = tempfile::tempdir().unwrap();
        let run = run_share(d.path());
        let stopped = Arc::new(shared());
        stopped.lock().down = Some(RunOutcome {
            ending: vng::Ending::Timeout(Duration::from_secs(5)),
            console_tail: vec!["the console's last line".into()],
            elapsed: Duration::from_secs(5),
            boot: None,
            guest: None,
            retries: vec![],
        });
        let (theirs, ours) = UnixStream::pair().unwrap();
        let served = Served {
            n: 0,
            from: KMSG.find("12,9,").unwrap() as u64,
            after: 8,
            asked: Instant::now(),
            start: Some(Instant::now()),
        };
        let (k, shared, ending) = (keeper(d.path()), stopped.clone(), WireEnding::Timeout(5));
        let keeping = std::thread::spawn(move || {
            let events = Events::new(|_| {});
            finish_run(ours, &run, ending, served, &shared, &k, &events).unwrap()
        });
        let mut answer = String::new();
        BufReader::new(theirs.try_clone().unwrap())
            .read_line(&mut answer)
            .unwrap();
        let Reply::Ended(ended) = serde_json::from_str(&answer).unwrap() else {
            panic!("{answer}")
        };
        assert_eq!(ended.ending, WireEnding::Timeout(5));
        assert_eq!(ended.console_tail, ["the console's last line"]);
        assert!(stopped.stop.load(Ordering::SeqCst), "the guest is stopped");
        let log = d.path().join("bpfvm-run-1/shared").join(KERNEL_LOG);
        let log = std::fs::read_to_string(log).unwrap();
        assert!(log.contains(";WARNING: CPU: 0 PID: 9 at"), "{log}");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !keeping.is_finished(),
            "let go of the share before the run did"
        );
        drop(theirs);
        keeping.join().unwrap();
    }

    /// After a run that exited, the guest is asked to settle (`end.N`); once it says so, the
    /// run's kernel log reaches the marker it wrote (a WARN of the kernel's deferred work after
    /// the script's last phase fails this run, not the next one's check), and the guest is
    /// kept for the next run.
    #[test]
    fn after_a_run_that_exited_the_guest_settles_and_the_log_reaches_its_end_marker() {
        let d = tempfile::tempdir().unwrap();
        let run = run_share(d.path());
        let mut k = keeper(d.path());
        let heard = d.path().join("heard");
        let mut cat = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cat > {}", heard.display()))
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        k.spec.input = Some(Arc::new(Mutex::new(cat.stdin.take())));
        let guest = Arc::new(shared());
        let answering = {
            let guest = guest.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                guest.lock().says.push_back("settled 0".into());
                guest.changed.notify_all();
            })
        };
        let (theirs, ours) = UnixStream::pair().unwrap();
        let served = Served {
            n: 0,
            from: KMSG.find("12,9,").unwrap() as u64,
            after: 8,
            asked: Instant::now(),
            start: None,
        };
        let (shared, input, shared_dir) = (guest.clone(), k.spec.input.clone(), run.shared.clone());
        let finishing = std::thread::spawn(move || {
            let events = Events::new(|_| {});
            finish_run(
                ours,
                &run,
                WireEnding::Exited(0),
                served,
                &shared,
                &k,
                &events,
            )
            .unwrap()
        });
        answering.join().unwrap();
        let mut answer = String::new();
        BufReader::new(theirs.try_clone().unwrap())
            .read_line(&mut answer)
            .unwrap();
        assert!(answer.contains("\"exited\":0"), "{answer}");
        assert!(!guest.stop.load(Ordering::SeqCst), "the guest is kept");
        let log = std::fs::read_to_string(shared_dir.join(KERNEL_LOG)).unwrap();
        assert!(log.contains(";WARNING: CPU: 0 PID: 9 at"), "{log}");
        assert!(log.ends_with(";bpfvm: warm end 0\n"), "{log}");
        drop(theirs);
        finishing.join().unwrap();
        drop(input);
        cat.wait().unwrap();
        assert_eq!(std::fs::read_to_string(heard).unwrap(), "end.0\n");
    }

    #[test]
    fn a_word_is_taken_with_what_came_before_it() {
        let mut says: VecDeque<String> =
            ["ready", "checked 0", "started 0"].map(String::from).into();
        assert!(!take(&mut says, "checked 1"));
        assert!(take(&mut says, "checked 0"));
        assert_eq!(says, ["started 0"]);
    }
}

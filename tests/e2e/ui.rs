//! `cairn ui` over HTTP (every page and endpoint, the token, Host and Origin checks,
//! escaping, the live feed across processes) and `cairn forget`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::recall::{cairn, seed};
use crate::support::{TestEnv, stderr, stdout};

/// A running `cairn ui`, killed on drop.
pub struct Ui {
    child: Child,
    /// The loopback address it listens on (its own, 127.x.y.z, on Linux).
    pub ip: String,
    pub port: u16,
    pub token: String,
}

impl Ui {
    pub fn start(env: &TestEnv) -> Ui {
        let mut c = env.cmd("cairn");
        c.args(["ui", "--no-open"]);
        Ui::spawn(c)
    }

    /// `cairn ui` allowed only `fds` open descriptors (`ulimit -n` in a shell that then
    /// becomes it).
    pub fn start_with_descriptors(env: &TestEnv, fds: u32) -> Ui {
        let base = env.cmd("cairn");
        let mut c = std::process::Command::new("sh");
        c.args([
            "-c",
            &format!("ulimit -n {fds} && exec \"$0\" ui --no-open"),
        ])
        .arg(base.get_program());
        for (k, v) in base.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        Ui::spawn(c)
    }

    fn spawn(mut c: std::process::Command) -> Ui {
        c.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = c.spawn().expect("spawn cairn ui");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read url");
        let url = line.trim().trim_start_matches("cairn ui: ").to_string();
        let rest = url.strip_prefix("http://").expect(&url);
        let (host, token) = rest.split_once("/?token=").expect(&url);
        let (ip, port) = host.split_once(':').expect(&url);
        assert!(ip.starts_with("127."), "{url}");
        Ui {
            child,
            ip: ip.to_string(),
            port: port.parse().expect("port"),
            token: token.to_string(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}:{}/?token={}", self.ip, self.port, self.token)
    }

    /// The page at `path` (no token).
    pub fn page(&self, path: &str) -> String {
        format!("http://{}:{}{path}", self.ip, self.port)
    }

    /// Where to connect.
    pub fn at(&self) -> (&str, u16) {
        (&self.ip, self.port)
    }

    pub fn cookie(&self) -> String {
        format!("cairn_{}={}", self.port, self.token)
    }

    pub fn host(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// A request with the cookie and the right Host.
    pub fn get(&self, path: &str) -> Answer {
        raw(
            self.at(),
            "GET",
            path,
            &[("Host", &self.host()), ("Cookie", &self.cookie())],
            "",
        )
    }

    pub fn post(&self, path: &str, form: &str) -> Answer {
        raw(
            self.at(),
            "POST",
            path,
            &[
                ("Host", &self.host()),
                ("Cookie", &self.cookie()),
                ("Origin", &format!("http://{}", self.host())),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            form,
        )
    }

    /// The form token in a page.
    pub fn csrf(&self) -> String {
        let page = self.get("/session/s2").body;
        let at = page.find("name=\"csrf\" value=\"").expect("csrf field") + 19;
        page[at..at + 32].to_string()
    }
}

impl Ui {
    /// The process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// One HTTP/1.1 request on its own connection, exactly as given (any Host, any Origin).
pub fn raw(
    at: (&str, u16),
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    try_raw(at, method, path, headers, body).expect("an answer")
}

/// [`raw`], `None` when the connection or a read or write fails.
pub fn try_raw(
    at: (&str, u16),
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Answer> {
    let addr: std::net::SocketAddr = format!("{}:{}", at.0, at.1).parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Some(Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

pub const HOSTILE: &str = "<script>alert('pwned')</script><img src=x onerror=alert(1)>";

#[test]
fn a_second_cairn_ui_points_at_the_running_one() {
    let env = TestEnv::new();
    seed(&env);
    let ui = Ui::start(&env);
    let kept = std::fs::read(env.data_dir.join("viewer.json")).expect("viewer.json");
    // Asked plainly, or on the port it already has.
    for args in [
        vec!["ui", "--no-open"],
        vec!["ui", "--no-open", "--port", &ui.port.to_string()],
    ] {
        let o = cairn(&env, &args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        let out = stdout(&o);
        assert!(out.contains("already running"), "{args:?}: {out}");
        assert!(out.contains(&ui.url()), "{out}");
        // Nothing moved: the first one's address and bookmarks stay good.
        assert_eq!(
            std::fs::read(env.data_dir.join("viewer.json")).expect("viewer.json"),
            kept
        );
    }
    let url = ui.url();
    drop(ui);
    // Once it stopped, a new one starts where it was.
    assert_eq!(Ui::start(&env).url(), url);
}

#[test]
fn a_stranger_at_the_viewer_s_old_address_is_never_sent_its_token() {
    let env = TestEnv::new();
    seed(&env);
    let ui = Ui::start(&env);
    let (old_url, ip, port) = (ui.url(), ui.ip.clone(), ui.port);
    drop(ui);
    // Another server takes the viewer's address, and viewer.json's pid names a live process
    // that is not the viewer (a reused pid): this test's own.
    let stranger = std::net::TcpListener::bind((ip.as_str(), port)).expect("bind");
    let path = env.data_dir.join("viewer.json");
    let mut kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("viewer.json")).expect("json");
    kept["pid"] = std::process::id().into();
    std::fs::write(&path, kept.to_string()).expect("write");
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let ears = heard.clone();
    std::thread::spawn(move || {
        for mut s in stranger.incoming().flatten() {
            let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
            let mut buf = [0u8; 4096];
            if let Ok(n) = s.read(&mut buf) {
                ears.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
            // It answers every request, as a careless server would, with 64 hex digits.
            let body = "0".repeat(64);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    // `cairn ui` asks it to prove it is the viewer, gets no proof, and starts a new one
    // elsewhere (Ui::start reads its address: "already running" would not parse).
    let again = Ui::start(&env);
    assert_ne!(again.url(), old_url);
    let token = old_url.split_once("token=").expect("token").1;
    let heard = String::from_utf8_lossy(&heard.lock().expect("lock")).to_string();
    assert!(heard.contains("GET /proof?nonce="), "it was asked: {heard}");
    assert!(
        !heard.contains(token),
        "the token reached a stranger: {heard}"
    );
}

#[test]
fn every_page_answers_only_with_the_token_from_this_host() {
    let env = TestEnv::new();
    let s = seed(&env);
    let ui = Ui::start(&env);
    let host = ui.host();
    let pages = [
        "/".to_string(),
        "/?project=acme".into(),
        "/search".into(),
        "/search?q=lease&project=acme&type=bugfix&kind=all&order=newest&since=3650d&until=&concept=&file=".into(),
        "/sessions".into(),
        "/sessions?project=acme".into(),
        "/session/s2".into(),
        "/health".into(),
        "/context".into(),
        "/context?project=acme&prompt=why+does+the+lease+expire".into(),
        "/context.json?project=acme".into(),
        "/?before=9999.9999.9999&from=50".into(),
        "/sessions?from=50".into(),
        "/search?q=lease&from=50".into(),
        "/session/s2?from=500".into(),
        format!("/memory/{}", s.title_hit),
        format!("/memory/S{}", s.summary),
        format!("/memory/P{}", s.prompt),
        format!("/timeline/{}", s.title_hit),
    ];
    // The stylesheet, script and icon hold no memory: served without the token (the
    // "Refused" page is styled), but only under this server's own name.
    for p in ["/app.js", "/style.css", "/favicon.svg"] {
        assert_eq!(
            raw(ui.at(), "GET", p, &[("Host", &host)], "").status,
            200,
            "{p}"
        );
        let rebound = raw(ui.at(), "GET", p, &[("Host", "attacker.example")], "");
        assert_eq!(rebound.status, 421, "{p}");
    }
    let refused = raw(ui.at(), "GET", "/", &[("Host", &host)], "");
    assert!(
        refused.body.contains("href=\"/style.css\""),
        "{}",
        refused.body
    );
    for p in &pages {
        let a = ui.get(p);
        assert_eq!(a.status, 200, "{p}: {a:?}");
        assert!(
            a.head
                .contains("Content-Security-Policy: default-src 'none'; script-src 'self'"),
            "{p}"
        );
        assert!(a.head.contains("Server-Timing: app;dur="), "{p}");
        // The page's own markup is markup, never escaped into its text.
        assert!(!a.body.contains("&lt;time"), "{p}: {}", a.body);
        // No token: refused, whatever the page.
        let none = raw(ui.at(), "GET", p, &[("Host", &host)], "");
        assert_eq!(none.status, 403, "{p} without a token");
        let wrong = raw(
            ui.at(),
            "GET",
            p,
            &[
                ("Host", &host),
                (
                    "Cookie",
                    &format!("cairn_{}=00000000000000000000000000000000", ui.port),
                ),
            ],
            "",
        );
        assert_eq!(wrong.status, 403, "{p} with a wrong token");
        // DNS rebinding: the right token under another name is still refused.
        let rebound = raw(
            ui.at(),
            "GET",
            p,
            &[("Host", "attacker.example"), ("Cookie", &ui.cookie())],
            "",
        );
        assert_eq!(rebound.status, 421, "{p} under another Host");
        let cross = raw(
            ui.at(),
            "GET",
            p,
            &[
                ("Host", &host),
                ("Cookie", &ui.cookie()),
                ("Origin", "http://attacker.example"),
            ],
            "",
        );
        assert_eq!(cross.status, 403, "{p} from another origin");
        let site = raw(
            ui.at(),
            "GET",
            p,
            &[
                ("Host", &host),
                ("Cookie", &ui.cookie()),
                ("Sec-Fetch-Site", "cross-site"),
            ],
            "",
        );
        assert_eq!(site.status, 403, "{p} from another site");
    }
    assert!(ui.get("/search?q=lease").body.contains("<mark>"));
    assert!(
        ui.get("/session/s2")
            .body
            .contains("Find why the worker loses its lease")
    );
    assert_eq!(ui.get("/nowhere").status, 404);
    assert_eq!(ui.get("/memory/99999").status, 404);
    assert_eq!(ui.get("/timeline/99999").status, 404);
    assert_eq!(ui.get("/session/nope").status, 404);
    assert!(
        ui.get("/search?q=x&type=nonsense")
            .body
            .contains("unknown type")
    );
    // The first visit trades the token in the URL for a cookie.
    let first = raw(
        ui.at(),
        "GET",
        &format!("/sessions?token={}", ui.token),
        &[("Host", &host)],
        "",
    );
    assert_eq!(first.status, 303, "{first:?}");
    assert!(first.head.contains("Location: /sessions"), "{}", first.head);
    assert!(
        first.head.contains(&format!(
            "Set-Cookie: {}; Path=/; HttpOnly; SameSite=Strict",
            ui.cookie()
        )),
        "{}",
        first.head
    );
    // Changes need the form token, and come only from this origin.
    let id = format!("id=1&csrf={}", ui.csrf());
    assert_eq!(ui.post("/queue/replay", "id=1").status, 403);
    assert_eq!(ui.post("/queue/replay", "id=1&csrf=0000").status, 403);
    let cross = raw(
        ui.at(),
        "POST",
        "/queue/replay",
        &[
            ("Host", &host),
            ("Cookie", &ui.cookie()),
            ("Origin", "http://attacker.example"),
        ],
        &id,
    );
    assert_eq!(cross.status, 403);
    // A GET never changes anything.
    assert_eq!(ui.get("/queue/replay?id=1").status, 404);
}

#[test]
fn the_first_visit_redirects_only_to_a_path_cairn_built() {
    let env = TestEnv::new();
    seed(&env);
    let ui = Ui::start(&env);
    let host = ui.host();
    let probe = |target: &str| {
        let a = raw(ui.at(), "GET", target, &[("Host", &host)], "");
        assert_eq!(a.status, 303, "{target}: {a:?}");
        let location = a
            .head
            .lines()
            .find_map(|l| l.strip_prefix("Location: "))
            .unwrap_or_else(|| panic!("{target}: no Location in {}", a.head))
            .to_string();
        assert!(!a.head.contains("X-Injected:"), "{}", a.head);
        location
    };
    let t = &ui.token;
    assert_eq!(
        probe(&format!("/%0d%0aX-Injected:%20yes?token={t}")),
        "/%0D%0AX-Injected%3A%20yes"
    );
    assert_eq!(
        probe(&format!("//evil.example/?token={t}")),
        "/evil.example"
    );
    assert_eq!(
        probe(&format!("/%2F%2Fevil.example?token={t}")),
        "/evil.example"
    );
    assert_eq!(
        probe(&format!("/search?q=lease+worker&token={t}&project=acme")),
        "/search?project=acme&q=lease%20worker"
    );
}

#[test]
fn idle_connections_and_few_descriptors_leave_the_viewer_serving() {
    let env = TestEnv::new();
    seed(&env);
    let mut ui = Ui::start_with_descriptors(&env, 64);
    let addr: std::net::SocketAddr = ui.host().parse().expect("address");
    // Hundreds of connections that never send a request, and some that never finish one:
    // more than the viewer's connection limit and its descriptors.
    let mut idle = Vec::new();
    for i in 0..300 {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            if i % 3 == 0 {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: ");
            }
            idle.push(s);
        }
    }
    assert!(idle.len() > 100, "only {} connections", idle.len());
    // Still running, and serving while they stay open: a page answers within the read
    // deadline that frees their places.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(ui.alive(), "cairn ui exited");
        let a = try_raw(
            ui.at(),
            "GET",
            "/",
            &[("Host", &ui.host()), ("Cookie", &ui.cookie())],
            "",
        );
        if a.as_ref().is_some_and(|a| a.status == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "not served: {a:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(idle);
    assert_eq!(ui.get("/sessions").status, 200);
    assert!(ui.alive());
}

#[test]
fn hostile_memory_text_shows_as_text() {
    let env = TestEnv::new();
    seed(&env);
    let out = cairn(
        &env,
        &[
            "save",
            HOSTILE,
            "--text",
            HOSTILE,
            "--project",
            "acme",
            "--json",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let id: i64 = env.count("SELECT max(id) FROM observations");
    let ui = Ui::start(&env);
    let escaped =
        "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;";
    for p in [
        "/".to_string(),
        "/search?q=pwned".into(),
        format!("/memory/{id}"),
        format!("/timeline/{id}"),
    ] {
        let body = ui.get(&p).body;
        assert!(body.contains("alert(&#39;pwned"), "{p}: {body}");
        assert!(!body.contains("<script>alert"), "{p}");
        assert!(!body.contains("<img src=x"), "{p}");
        let _ = escaped;
    }
    let hit = ui.get("/search?q=pwned").body;
    assert!(hit.contains("<mark>pwned</mark>"), "{hit}");
    // Bidirectional controls cannot reorder what is shown.
    let out = cairn(
        &env,
        &["save", "invoice \u{202E}fdp.exe", "--project", "acme"],
    );
    assert!(out.status.success(), "{out:?}");
    let feed = ui.get("/").body;
    assert!(feed.contains("invoice \u{FFFD}fdp.exe"), "{feed}");
    assert!(!feed.contains('\u{202E}'));
}

#[test]
fn the_live_feed_delivers_a_memory_written_by_another_process() {
    let env = TestEnv::new();
    seed(&env);
    let ui = Ui::start(&env);
    let seen = env.count("SELECT max(id) FROM observations");
    let mut s = TcpStream::connect(ui.at()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .expect("timeout");
    write!(
        s,
        "GET /events?project=acme&o={seen}&s=999999&p=999999 HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\n\r\n",
        ui.host(),
        ui.cookie()
    )
    .expect("write");
    // Written by another process: `cairn save`, then one in another project.
    let other = cairn(&env, &["save", "not this one", "--project", "globex"]);
    assert!(other.status.success(), "{other:?}");
    let out = cairn(&env, &["save", HOSTILE, "--project", "acme"]);
    assert!(out.status.success(), "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && !got.contains("pwned") {
        if let Ok(n) = s.read(&mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    assert!(
        got.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream"),
        "{got}"
    );
    assert!(got.contains("event: memory\ndata: {"), "{got}");
    // JSON-encoded, for the page to put in with textContent.
    assert!(
        got.contains(r#""title":"<script>alert('pwned')</script><img src=x onerror=alert(1)>""#),
        "{got}"
    );
    assert!(!got.contains("not this one"), "{got}");
}

#[test]
fn replay_discard_and_forget_from_the_page() {
    let env = TestEnv::new();
    let s = seed(&env);
    let db = env.db();
    for key in ["tool:a", "tool:b"] {
        db.execute(
            "INSERT INTO pending_messages (session_id, project, kind, prompt_number, payload, dedupe_key,
                 status, attempts, last_error, available_at, created_at, updated_at)
             VALUES ('s2', 'acme', 'observation', 1, '{}', ?1, 'skipped', 3, 'model said <no>', 1, 1, 1)",
            [key],
        )
        .expect("job");
    }
    let ui = Ui::start(&env);
    let health = ui.get("/health").body;
    assert!(health.contains("model said &lt;no&gt;"), "{health}");
    // No model call yet: said in words, not as an empty chart reading "max 1".
    assert!(health.contains("id=\"no-tokens\""), "{health}");
    assert!(!health.contains("max 1"), "{health}");
    let csrf = ui.csrf();
    let replay = ui.post("/queue/replay", &format!("id=1&csrf={csrf}"));
    assert_eq!(replay.status, 303, "{replay:?}");
    assert!(
        replay
            .head
            .contains("Location: /health?done=job%201%20replayed"),
        "{}",
        replay.head
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE id = 1 AND status = 'pending'"),
        1
    );
    // Discarding asks first.
    let ask = ui.post("/queue/discard", &format!("id=2&csrf={csrf}"));
    assert_eq!(ask.status, 200, "{ask:?}");
    assert!(ask.body.contains("Discard job 2?"), "{}", ask.body);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE id = 2"),
        1
    );
    assert_eq!(
        ui.post("/queue/discard", &format!("id=2&confirm=yes&csrf={csrf}"))
            .status,
        303
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE id = 2"),
        0
    );
    let again = ui.post("/queue/replay", &format!("id=2&csrf={csrf}"));
    assert!(again.head.contains("nothing%20replayed"), "{}", again.head);
    assert_eq!(
        ui.post("/queue/replay", &format!("csrf={csrf}")).status,
        400
    );
    assert!(
        ui.get("/health?done=job%201%20replayed")
            .body
            .contains("id=\"notice\">job 1 replayed")
    );
    // Replay all, and the quarantine cleared from the page (asked first).
    db.execute(
        "UPDATE pending_messages SET status = 'skipped' WHERE id = 1",
        [],
    )
    .expect("skip again");
    let all = ui.post("/queue/replay", &format!("all=yes&csrf={csrf}"));
    assert!(
        all.head.contains("1%20skipped%20jobs%20replayed"),
        "{}",
        all.head
    );
    db.execute(
        "INSERT INTO quarantine (event, reason, raw, raw_len, created_at) VALUES ('Stop', 'bad json', x'00', 1, 1)",
        [],
    )
    .expect("quarantine");
    let health = ui.get("/health").body;
    assert!(!health.contains("cairn queue"), "{health}");
    assert!(health.contains("id=\"clear-quarantine\""), "{health}");
    let ask = ui.post("/quarantine/clear", &format!("csrf={csrf}"));
    assert!(ask.body.contains("Clear the quarantine?"), "{}", ask.body);
    assert_eq!(env.count("SELECT count(*) FROM quarantine"), 1);
    let cleared = ui.post("/quarantine/clear", &format!("confirm=yes&csrf={csrf}"));
    assert!(cleared.head.contains("1%20quarantined"), "{}", cleared.head);
    assert_eq!(env.count("SELECT count(*) FROM quarantine"), 0);

    // Forget one memory: asked first, then gone from search.
    let ask = ui.post("/forget", &format!("ref={}&csrf={csrf}", s.title_hit));
    assert!(ask.body.contains("Forget memory"), "{}", ask.body);
    assert_eq!(env.count("SELECT count(*) FROM observations"), 5);
    let done = ui.post(
        "/forget",
        &format!("ref={}&confirm=yes&csrf={csrf}", s.title_hit),
    );
    assert!(done.body.contains("1 memory deleted"), "{}", done.body);
    assert_eq!(ui.get(&format!("/memory/{}", s.title_hit)).status, 404);
    assert!(
        !ui.get("/search?q=rescue+counts")
            .body
            .contains(&format!("/memory/{}\"", s.title_hit))
    );
    assert_eq!(
        ui.post("/forget", &format!("ref=999999&csrf={csrf}"))
            .status,
        404
    );
    assert_eq!(
        ui.post("/forget", &format!("ref=zz&csrf={csrf}")).status,
        400
    );
    // A whole session.
    let ask = ui.post("/forget", &format!("session=s2&csrf={csrf}"));
    assert!(
        ask.body.contains("the memories of session s2"),
        "{}",
        ask.body
    );
    let done = ui.post("/forget", &format!("session=s2&confirm=yes&csrf={csrf}"));
    assert!(done.body.contains("memories deleted"), "{}", done.body);
    assert_eq!(
        env.count("SELECT count(*) FROM observations WHERE session_id = 's2'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM user_prompts WHERE session_id = 's2'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM session_summaries WHERE session_id = 's2'"),
        0
    );
}

#[test]
fn forget_on_the_cli_leaves_no_hit_and_no_reimport() {
    let env = TestEnv::new();
    let s = seed(&env);
    let export = env.tmp.path().join("all.jsonl");
    let out = cairn(
        &env,
        &["export", "--output", export.to_str().expect("path")],
    );
    assert!(out.status.success(), "{out:?}");
    // Not on a terminal and no --yes: refused, nothing deleted.
    let refused = cairn(&env, &["forget", &s.title_hit.to_string()]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(env.count("SELECT count(*) FROM observations"), 5);
    let id = s.title_hit.to_string();
    let sum = format!("S{}", s.summary);
    let prompt = format!("P{}", s.prompt);
    let out = cairn(&env, &["forget", &id, &sum, &prompt, "--yes"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        "forgotten: 1 observations, 1 summaries, 1 prompts\n"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM embedding_queue WHERE kind = 0 AND ref_id = {id}"
        )),
        0
    );
    // Forgetting again, or an id never given, names what was not there.
    let again = cairn(&env, &["forget", &id, "S99999", "--yes"]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(
        stderr(&again).contains(&format!(
            "no memory {id}, S99999 (never saved, or forgotten already)"
        )),
        "{}",
        stderr(&again)
    );
    let search = cairn(&env, &["search", "rescue", "counts", "--json"]);
    assert!(
        !stdout(&search).contains(&format!("\"id\": {id},")),
        "{}",
        stdout(&search)
    );
    // The export still holds them; importing it brings none back.
    let out = cairn(&env, &["import", "jsonl", export.to_str().expect("path")]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains("forgotten, left out: 1 prompt, 1 observation, 1 summary")
            || stdout(&out).contains("forgotten, left out:"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM observations WHERE id = {id}"
        )),
        0
    );
    assert_eq!(env.count("SELECT count(*) FROM observations"), 4);
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 0);
    // A whole session; then nothing left to forget.
    let out = cairn(&env, &["forget", "--session", "s1", "--yes"]);
    assert!(out.status.success(), "{out:?}");
    let none = cairn(&env, &["forget", "--session", "s1", "--yes"]);
    assert_eq!(none.status.code(), Some(1), "{none:?}");
}

#[test]
fn the_context_page_changes_only_safe_settings_through_the_writer() {
    let env = TestEnv::new();
    seed(&env);
    let file = env.data_dir.join("settings.json");
    std::fs::write(&file, r#"{"embed": {"provider": "off"}}"#).expect("settings");
    let ui = Ui::start(&env);
    let csrf = ui.csrf();
    let original = std::fs::read(&file).expect("read");
    let unchanged = |what: &str| {
        assert_eq!(std::fs::read(&file).expect("read"), original, "{what}");
    };
    let change = "key=context.max_observations&value=1&project=acme";
    // The form token is needed in the body (the cookie alone is not enough), and the
    // change must come from this origin.
    assert_eq!(ui.post("/context/settings", change).status, 403);
    let cross = raw(
        ui.at(),
        "POST",
        "/context/settings",
        &[
            ("Host", &ui.host()),
            ("Cookie", &ui.cookie()),
            ("Origin", "http://127.0.0.1:1"),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &format!("{change}&csrf={csrf}"),
    );
    assert_eq!(cross.status, 403);
    unchanged("refused requests");
    // Paths, model endpoints and keys, sync: never from the page.
    for key in [
        "embed.model_dir",
        "model.base_url",
        "model.api_key_env",
        "sync.projects",
        "embed.provider",
    ] {
        let a = ui.post(
            "/context/settings",
            &format!("key={key}&value=x&project=acme&csrf={csrf}"),
        );
        assert_eq!(a.status, 400, "{key}: {a:?}");
        assert!(a.body.contains("cannot be changed here"), "{key}");
        unchanged(key);
    }
    // An invalid value: the error on the page, nothing written.
    let bad = ui.post(
        "/context/settings",
        &format!("key=recall.min_relevance&value=7&project=acme&csrf={csrf}"),
    );
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(bad.body.contains("id=\"setting-refused\""), "{}", bad.body);
    assert!(bad.body.contains("must be between 0 and 1"), "{}", bad.body);
    unchanged("invalid value");

    // A good change: written as `cairn config set` writes it, the page shows the new block.
    let before = ui.get("/context?project=acme").body;
    let done = ui.post("/context/settings", &format!("{change}&csrf={csrf}"));
    assert_eq!(done.status, 200, "{done:?}");
    assert!(
        done.body.contains("id=\"setting-changed\""),
        "{}",
        done.body
    );
    // Default is offered once the file sets the key.
    let default_button = "id=\"set-context-max_observations-default\"";
    assert!(!before.contains(default_button));
    assert!(done.body.contains(default_button));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert_eq!(written["context"]["max_observations"], 1);
    assert_eq!(written["embed"]["provider"], "off", "other keys kept");
    let printed = cairn(&env, &["context", "--project", "acme"]);
    assert!(printed.status.success(), "{printed:?}");
    let block = |page: &str| {
        let start = page.find("id=\"context\"").expect("block");
        let from = start + page[start..].find('>').expect(">") + 1;
        let to = from + page[from..].find("</pre>").expect("</pre>");
        page[from..to].to_string()
    };
    assert_ne!(block(&before), block(&done.body));
    assert_eq!(
        block(&done.body)
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
            .trim(),
        stdout(&printed).trim()
    );
    // Default removes it from the file again.
    let reset = ui.post(
        "/context/settings",
        &format!("key=context.max_observations&unset=yes&project=acme&csrf={csrf}"),
    );
    assert_eq!(reset.status, 200, "{reset:?}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert!(written.get("context").is_none(), "{written}");
    assert_eq!(block(&reset.body), block(&before));

    // Recall at prompts turned off: the page gives nothing, and says which setting.
    let asked = "/context?project=acme&prompt=why+does+the+lease+expire";
    assert!(!ui.get(asked).body.contains("id=\"prompt-off\""));
    let off = ui.post(
        "/context/settings",
        &format!("key=recall.at_prompt&value=false&project=acme&csrf={csrf}"),
    );
    assert_eq!(off.status, 200, "{off:?}");
    let page = ui.get(asked).body;
    assert!(page.contains("id=\"prompt-off\""), "{page}");
    assert!(
        page.contains("<code>recall.at_prompt false</code>"),
        "{page}"
    );
    assert!(!page.contains("id=\"prompt-how\""), "{page}");
}

//! `cairn ui` in a real headless browser: Debian's `chromium` driven by `chromedriver` over
//! WebDriver (plain HTTP with ureq). `.ci/run` installs both; on CI a missing browser
//! fails this test. With `CAIRN_SCREENSHOTS=DIR` set it saves the main pages as PNGs there
//! (the README's screenshots come from `docs/screenshots`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::recall::{T0, cairn, seed};
use super::support::{TestEnv, model_dir, stdout};
use super::ui::{HOSTILE, Ui};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn find_program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

struct Driver {
    child: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self
            .agent
            .delete(&format!("{}/session/{}", self.base, self.session))
            .call();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn call(agent: &ureq::Agent, method: &str, url: &str, body: Option<Value>) -> Value {
    let mut res = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        ("DELETE", _) => agent.delete(url).call(),
        (_, b) => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(b.unwrap_or(json!({})).to_string()),
    }
    .expect(url);
    let text = res.body_mut().read_to_string().expect("body");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

impl Driver {
    fn start(chromedriver: &Path, chromium: Option<&Path>) -> Driver {
        let port = free_port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut r) = agent.get(&format!("{base}/status")).call()
                && r.body_mut()
                    .read_to_string()
                    .is_ok_and(|t| t.contains("\"ready\":true"))
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().expect("profile");
        let mut options = json!({
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1200,900",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        });
        if let Some(bin) = chromium {
            options["binary"] = json!(bin.display().to_string());
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options}}});
        let v = call(&agent, "POST", &format!("{base}/session"), Some(caps));
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        Driver {
            child,
            base,
            session,
            agent,
            _profile: profile,
        }
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/session/{}{tail}", self.base, self.session)
    }

    fn go(&self, url: &str) {
        call(
            &self.agent,
            "POST",
            &self.url("/url"),
            Some(json!({"url": url})),
        );
    }

    fn find(&self, css: &str) -> Option<String> {
        let v = call(
            &self.agent,
            "POST",
            &self.url("/element"),
            Some(json!({"using": "css selector", "value": css})),
        );
        v["value"][ELEMENT].as_str().map(str::to_string)
    }

    /// Waits up to 20 s for an element.
    fn wait(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(e) = self.find(css) {
                return e;
            }
            assert!(Instant::now() < deadline, "no element {css}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn text(&self, element: &str) -> String {
        let v = call(
            &self.agent,
            "GET",
            &self.url(&format!("/element/{element}/text")),
            None,
        );
        v["value"].as_str().unwrap_or_default().to_string()
    }

    fn click(&self, element: &str) {
        call(
            &self.agent,
            "POST",
            &self.url(&format!("/element/{element}/click")),
            None,
        );
    }

    fn type_in(&self, element: &str, text: &str) {
        call(
            &self.agent,
            "POST",
            &self.url(&format!("/element/{element}/value")),
            Some(json!({"text": text})),
        );
    }

    fn clear(&self, element: &str) {
        call(
            &self.agent,
            "POST",
            &self.url(&format!("/element/{element}/clear")),
            None,
        );
    }

    fn script(&self, js: &str) -> Value {
        call(
            &self.agent,
            "POST",
            &self.url("/execute/sync"),
            Some(json!({"script": js, "args": []})),
        )["value"]
            .clone()
    }

    fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("CAIRN_SCREENSHOTS") else {
            return;
        };
        let v = call(&self.agent, "GET", &self.url("/screenshot"), None);
        let png = base64(v["value"].as_str().expect("screenshot"));
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(Path::new(&dir).join(format!("{name}.png")), png).expect("write png");
    }
}

fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = s.bytes().filter(|c| !b"=\n\r".contains(c)).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | (val(*c) as u32) << (18 - 6 * i));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len() - 1]);
    }
    out
}

#[test]
fn the_viewer_works_in_a_real_browser() {
    let Some(chromedriver) = find_program("chromedriver") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromedriver is not installed: .ci/run installs chromium and chromium-driver"
        );
        eprintln!("skipped: no chromedriver (apt-get install chromium chromium-driver)");
        return;
    };
    let chromium = find_program("chromium");
    let env = TestEnv::new();
    let s = seed(&env);
    env.db()
        .execute(
            "INSERT INTO pending_messages (session_id, project, kind, prompt_number, payload, dedupe_key,
                 status, attempts, last_error, available_at, created_at, updated_at)
             VALUES ('s2', 'acme', 'observation', 1, '{}', 'tool:x', 'skipped', 3,
                     'model returned no observations', 1, 1, 1)",
            [],
        )
        .expect("skipped job");
    let job = env.count("SELECT max(id) FROM pending_messages");
    // A month of model calls for the tokens chart.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    for day in 0..30i64 {
        env.db()
            .execute(
                "INSERT INTO model_calls (provider, model, purpose, input_tokens, output_tokens,
                     latency_ms, outcome, created_at)
                 VALUES ('anthropic', 'claude-haiku', 'observation', ?1, ?2, 900, 'ok', ?3)",
                [
                    2_000 + (day * 7_919) % 9_000,
                    400 + (day * 31) % 700,
                    now - day * 86_400_000,
                ],
            )
            .expect("model call");
    }
    // Older memories than one page holds, in a project of their own; the oldest of all.
    let bulk = 130;
    {
        use cairn_core::memory::observations::{NewObservation, insert_observation};
        use cairn_core::store::db::{self, OpenOptions};
        let mut conn = db::open_data_dir(
            &cairn_core::store::paths::DataDir::new(&env.data_dir),
            OpenOptions::default(),
        )
        .expect("open");
        db::write(&mut conn, |tx| {
            cairn_core::memory::sessions::ensure(
                tx,
                "old",
                "archive",
                "/archive",
                T0 - 400 * 86_400_000,
            )?;
            for i in 0..bulk {
                let o = NewObservation {
                    session_id: Some("old".into()),
                    project: "archive".into(),
                    prompt_number: Some(1),
                    kind: "change".into(),
                    origin: "model".into(),
                    created_at: T0 - 300 * 86_400_000 + i * 60_000,
                    content: cairn_core::memory::rows::ObservationContent {
                        title: format!("archived change {i}"),
                        narrative: "kept for paging".into(),
                        ..Default::default()
                    },
                    ..NewObservation::default()
                };
                insert_observation(tx, &o)?;
            }
            Ok(())
        })
        .expect("bulk");
    }
    // Search by meaning with the real model: a nonsense query then finds nearest memories
    // that must not be shown as matches.
    let settings = json!({"embed": {"model_dir": model_dir(), "provider": "local"}});
    std::fs::write(env.data_dir.join("settings.json"), settings.to_string()).expect("settings");
    let embedded = env.run("cairn", &["embed"], b"");
    assert_eq!(embedded.status.code(), Some(0), "{embedded:?}");
    let ui = Ui::start(&env);
    let d = Driver::start(&chromedriver, chromium.as_deref());

    // The feed, then a new memory arriving from another process: hostile text as text.
    d.go(&ui.url());
    d.wait("#feed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.text(&d.wait("#live")).starts_with("Waiting") {
        assert!(Instant::now() < deadline, "the live feed never connected");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = cairn(
        &env,
        &[
            "save",
            HOSTILE,
            "--project",
            "acme",
            "--text",
            "from the browser test",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let fresh = d.wait("#feed li.fresh .title");
    assert_eq!(d.text(&fresh), HOSTILE);
    // Delivered once, however the stream's reads and the write fell: once a later memory
    // has arrived, the first is there exactly once.
    let later = cairn(&env, &["save", "a later memory", "--project", "acme"]);
    assert!(later.status.success(), "{later:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.script("return document.querySelectorAll('#feed li.fresh').length") != json!(2) {
        assert!(Instant::now() < deadline, "the later memory never arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        d.script(&format!(
            "return [...document.querySelectorAll('#feed .title')].filter(e => e.textContent === {}).length",
            json!(HOSTILE)
        )),
        json!(1)
    );
    // Times are in the browser's time zone, and the page says which.
    assert!(d.text(&d.wait("#tz")).starts_with("Times in "), "time zone");
    assert!(!d.text(&d.wait("#tz")).contains("UTC."));
    assert_eq!(
        d.script("return document.querySelectorAll('#feed img, #feed script').length"),
        json!(0)
    );
    d.screenshot("feed");

    // Paging reaches the oldest memory.
    let mut pages = 0;
    loop {
        d.wait(".count");
        let Some(older) = d.find("#older") else { break };
        let shown = d.script("return document.querySelector('.count').textContent");
        d.click(&older);
        pages += 1;
        assert!(pages < 20, "the feed never ends");
        let deadline = Instant::now() + Duration::from_secs(20);
        while d.script("return (document.querySelector('.count') || {}).textContent") == shown {
            assert!(Instant::now() < deadline, "the older page never came");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(pages >= 2, "{pages} pages");
    let last =
        d.script("return [...document.querySelectorAll('.items .title')].map(e => e.textContent)");
    assert!(
        last.as_array()
            .expect("titles")
            .iter()
            .any(|t| t == "archived change 0"),
        "{last}"
    );
    assert!(d.text(&d.wait(".count")).contains(&format!("of {}", thousands(env.count("SELECT (SELECT count(*) FROM observations) + (SELECT count(*) FROM session_summaries) + (SELECT count(*) FROM user_prompts)")))));

    // The context page shows exactly what `cairn context` prints.
    let printed = cairn(&env, &["context", "--project", "acme"]);
    assert!(printed.status.success(), "{printed:?}");
    d.go(&ui.page("/context?project=acme"));
    let pre = d.wait("#context");
    assert_eq!(d.text(&pre).trim(), stdout(&printed).trim());
    d.screenshot("context");

    // A setting changed on the page: written to settings.json (the rest kept), the block
    // and its token count as `cairn context` now prints them.
    let tokens_before = d.text(&d.wait("#context-tokens"));
    let input = d.wait("#set-context-max_observations");
    d.clear(&input);
    d.type_in(&input, "1");
    d.click(&d.wait("#set-context-max_observations-save"));
    d.wait("#setting-changed");
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(env.data_dir.join("settings.json")).expect("settings"),
    )
    .expect("json");
    assert_eq!(written["context"]["max_observations"], 1);
    assert_eq!(written["embed"]["provider"], "local", "other keys kept");
    let printed = cairn(&env, &["context", "--project", "acme"]);
    assert!(printed.status.success(), "{printed:?}");
    assert_eq!(d.text(&d.wait("#context")).trim(), stdout(&printed).trim());
    let tokens_after = d.text(&d.wait("#context-tokens"));
    assert!(
        tokens_after.parse::<usize>().expect("tokens")
            < tokens_before.parse::<usize>().expect("tokens"),
        "{tokens_before} -> {tokens_after}"
    );
    // An invalid value: the error on the page, settings.json as it was.
    let file_before = std::fs::read(env.data_dir.join("settings.json")).expect("settings");
    let input = d.wait("#set-recall-min_relevance");
    d.clear(&input);
    d.type_in(&input, "seven");
    d.click(&d.wait("#set-recall-min_relevance-save"));
    let refused = d.wait("#setting-refused");
    assert!(
        d.text(&refused).contains("recall.min_relevance"),
        "{}",
        d.text(&refused)
    );
    assert_eq!(
        std::fs::read(env.data_dir.join("settings.json")).expect("settings"),
        file_before
    );
    assert_eq!(d.text(&d.wait("#context")).trim(), stdout(&printed).trim());
    // Back to the default for the pages that follow.
    d.click(&d.wait("#set-context-max_observations-default"));
    d.wait("#setting-changed");
    assert_eq!(d.text(&d.wait("#context")).trim(), {
        let again = cairn(&env, &["context", "--project", "acme"]);
        stdout(&again).trim().to_string()
    });

    // Search, with highlighted matches.
    d.go(&ui.page("/search"));
    let q = d.wait("#q");
    d.type_in(&q, "lease\n");
    d.wait(".hits mark");
    d.screenshot("search");

    // Each result shows its relevance; a nonsense query shows nothing as relevant.
    assert!(d.text(&d.wait(".hits .score")).starts_with("relevance "));
    d.go(&ui.page("/search?q=zzzzqqq"));
    d.wait("#none-relevant");
    assert_eq!(
        d.script("return document.querySelectorAll('.hits li').length"),
        json!(0)
    );
    d.go(&ui.page("/search?q=lease"));

    // Open a memory from the hits.
    let link = d.wait(&format!(".hits a[href='/memory/{}']", s.title_hit));
    d.click(&link);
    let h1 = d.wait("h1");
    assert!(
        d.text(&h1)
            .contains("Lease rescue counts as a failed attempt"),
        "{}",
        d.text(&h1)
    );
    d.screenshot("memory");

    // Replay a skipped job from the health page.
    d.go(&ui.page("/health"));
    d.wait(".chart");
    d.screenshot("health");
    let button = d.wait(&format!("#replay-{job}"));
    d.click(&button);
    let notice = d.wait("#notice");
    assert_eq!(d.text(&notice), format!("job {job} replayed"));
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM pending_messages WHERE id = {job} AND status = 'pending'"
        )),
        1
    );
    d.go(&ui.page("/session/s2"));
    d.wait(".turn");
    d.screenshot("session");

    // Another local server neither receives the session cookie nor replaces it: the
    // browser visits it (it tries to set its own value of the cookie), then the viewer.
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    other.set_nonblocking(true).expect("nonblocking");
    let other_port = other.local_addr().expect("addr").port();
    let cookie_name = format!("cairn_{}", ui.port);
    let set = cookie_name.clone();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = std::sync::Arc::clone(&done);
    let heard = std::thread::spawn(move || {
        let mut heads = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Ok((mut s, _)) = other.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 8192];
            let n = std::io::Read::read(&mut s, &mut buf).unwrap_or(0);
            heads.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = std::io::Write::write_all(
                &mut s,
                format!(
                    "HTTP/1.1 200 OK\r\nSet-Cookie: {set}=00000000000000000000000000000000; Path=/\r\n\
                     Content-Type: text/html\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
                )
                .as_bytes(),
            );
        }
        heads
    });
    d.go(&format!("http://127.0.0.1:{other_port}/first"));
    d.wait("body");
    d.go(&format!("http://localhost:{other_port}/second"));
    d.wait("body");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let heads = heard.join().expect("listener");
    let first = heads
        .iter()
        .find(|h| h.starts_with("GET /first "))
        .expect("the browser visited the other server");
    // Before it set one, no cookie of the viewer's name came; never the viewer's token.
    assert!(!first.contains(&cookie_name), "{first}");
    for h in &heads {
        assert!(!h.contains(&ui.token), "{h}");
    }
    d.go(&ui.page("/sessions"));
    let h1 = d.wait("h1");
    assert_eq!(d.text(&h1), "Sessions");
    // Sessions read as a history; choosing a project shows it, no "Show" click.
    assert!(d.text(&d.wait(".sessions .title a")).len() > 3);
    d.script(
        "const s = document.querySelector('form.bar select[name=project]'); \
         s.value = 'archive'; s.dispatchEvent(new Event('change')); return null",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.script("return location.search") != json!("?project=archive") {
        assert!(
            Instant::now() < deadline,
            "choosing a project did not show it"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(d.text(&d.wait(".count")).contains("of 1 sessions"));
}

fn thousands(n: i64) -> String {
    cairn_core::viewer::pages::thousands(n)
}

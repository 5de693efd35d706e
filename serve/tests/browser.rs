//! The web page in a real browser: headless Chromium, driven over the W3C WebDriver protocol by
//! Debian's `chromedriver`, signs in with a token, sees the seeded dead letter among the
//! problems, follows it to the consumer's page and to the event's attempts; then an operator
//! proposes its replay and an approver approves it, each signed in with their own token, and
//! once the consumer has handled the replayed delivery the problems page shows none.
//! Screenshots of each page are written to `target/tmp/serve-screenshots/`.
//!
//! Chromium and chromedriver come from Debian's `chromium` and `chromium-driver` (`.ci/run`
//! installs them). Where they are missing the test says so and skips, except under `CI=true`.

mod support;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use evc::SqliteStore;
use evc_serve::Outbox;
use serde_json::{Value, json};

use evc_reference::tour::Notifier;
use support::{APPROVER, BoxError, CONSUMER, OPERATOR, READER, Server, TestResult, seed, settle};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_replay_a_dead_letter_from_the_page_and_it_recovers() -> TestResult {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        let ci = std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
        assert!(!ci, "CI=true and {CHROMIUM} or {CHROMEDRIVER} is missing");
        eprintln!(
            "skipped: {CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)"
        );
        return Ok(());
    }
    support::with_sqlite(|store: SqliteStore| async move {
        let server = Server::start(Outbox::Sqlite(store.clone())).await?;
        let driver = Driver::start().await?;
        let result = browse(&driver, &server, &store).await;
        driver.stop().await;
        result
    })
    .await
}

async fn browse(driver: &Driver, server: &Server, store: &SqliteStore) -> TestResult {
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-screenshots");
    std::fs::create_dir_all(&shots)?;

    driver.go(&server.url("/")).await?;
    assert!(driver.url().await?.ends_with("/login"), "sent to sign in");
    driver.type_into("#token", READER).await?;
    driver.click("button[type=submit]").await?;
    driver.arrive(&server.url("/")).await?;
    assert!(!dead_lettered(driver).await?, "nothing is dead yet");
    let before = driver.refreshes().await?;

    // A handler fails while the reader looks at the problems: the dead letter appears without
    // a reload.
    let seeded = seed(store).await?;
    let dead = &seeded.dead.to_string();
    driver.wait_until(|| dead_lettered(driver)).await?;
    assert!(
        driver.refreshes().await? > before,
        "swapped in, not reloaded"
    );
    assert_eq!(driver.url().await?, server.url("/"));
    let problem = driver.text("#problems li a").await?;
    assert!(problem.contains(CONSUMER), "{problem}");
    driver.screenshot(&shots.join("problems.png")).await?;

    driver.click("#problems li a").await?;
    driver
        .arrive(&server.url(&format!("/consumers/{CONSUMER}")))
        .await?;
    let letters = driver.text("#dead-letters").await?;
    assert!(letters.contains(dead), "{letters}");
    driver.screenshot(&shots.join("consumer.png")).await?;

    driver.click("#dead-letters a").await?;
    driver
        .arrive(&server.url(&format!("/events/{dead}")))
        .await?;
    assert!(driver.text("main").await?.contains("mailbox_rejected"));
    driver.screenshot(&shots.join("event.png")).await?;

    // Two people replay the dead letter: bob, an operator, proposes; eve, an approver, reads
    // the plan and approves it.
    driver.sign_in_as(server, OPERATOR).await?;
    driver
        .go(&server.url(&format!("/consumers/{CONSUMER}")))
        .await?;
    assert!(
        !driver.has("#approve").await?,
        "an operator approves nothing"
    );
    driver.click("#propose button").await?;
    // POST, redirect, GET: the browser is back on the consumer's page, with the answer.
    driver.appears("#notice").await?;
    assert_eq!(
        driver.url().await?,
        server.url(&format!("/consumers/{CONSUMER}"))
    );
    let notice = driver.text("#notice").await?;
    assert!(notice.starts_with("Proposed plan"), "{notice}");
    driver.sign_in_as(server, APPROVER).await?;
    driver
        .go(&server.url(&format!("/consumers/{CONSUMER}")))
        .await?;
    assert!(
        !driver.has("#propose").await?,
        "an approver proposes nothing"
    );
    driver
        .type_into("#reason", "the mailbox accepts mail again")
        .await?;
    driver.type_into("#approval_ref", "CHG-7").await?;
    driver.click("#approve button").await?;
    driver.appears("#notice").await?;
    let notice = driver.text("#notice").await?;
    assert!(notice.starts_with("Applied replay"), "{notice}");
    driver.screenshot(&shots.join("approved.png")).await?;

    // The mailbox works again: the consumer handles the replayed delivery, and its page, open
    // meanwhile, shows it recover without a reload.
    driver
        .go(&server.url(&format!("/consumers/{CONSUMER}")))
        .await?;
    assert_eq!(
        driver.text("#pending").await?,
        "1",
        "replayed, not yet handled"
    );
    let before = driver.refreshes().await?;
    settle(store, Arc::new(Notifier::default())).await?;
    driver
        .wait_until(|| async { Ok(driver.text("#pending").await? == "0") })
        .await?;
    assert!(driver.has("#no-dead-letters").await?);
    assert!(
        driver.refreshes().await? > before,
        "swapped in, not reloaded"
    );
    driver.go(&server.url("/")).await?;
    // The dead letter's problem is gone (no other problem is asserted away: lag depends on how
    // long the machine took).
    let problems = if driver.has("#problems").await? {
        driver.text("#problems").await?
    } else {
        String::new()
    };
    assert!(!problems.contains("dead-lettered"), "{problems}");
    driver.screenshot(&shots.join("recovered.png")).await?;
    eprintln!("screenshots: {}", shots.display());
    Ok(())
}

/// Whether the problems page lists a dead letter.
async fn dead_lettered(driver: &Driver) -> Result<bool, BoxError> {
    Ok(driver.has("#problems").await? && driver.text("#problems").await?.contains("dead-lettered"))
}

/// A chromedriver process and one headless Chromium session on it; dropping it kills the
/// process group (chromedriver and the browser it started), also when an assertion fails.
struct Driver {
    process: Child,
    http: reqwest::Client,
    session: String,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group's id is chromedriver's pid (`process_group(0)`).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.process.id())])
            .status();
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Driver {
    async fn start() -> Result<Self, BoxError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let process = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // A bound on a hang of any one command, not a timing assertion.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()?;
        let profile = tempfile::tempdir()?;
        let base = format!("http://127.0.0.1:{port}");
        // A bound on a hang, not a timing assertion: chromedriver answers when it is up.
        let mut ready = false;
        for _ in 0..600 {
            if let Ok(status) = http.get(format!("{base}/status")).send().await {
                let status: Value = status.json().await?;
                if status["value"]["ready"] == true {
                    ready = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut driver = Self {
            process,
            http,
            session: String::new(),
            profile,
        };
        if !ready {
            return Err("chromedriver did not become ready".into());
        }
        let user_data = format!("--user-data-dir={}", driver.profile.path().display());
        let created: Value = driver
            .http
            .post(format!("{base}/session"))
            .json(&json!({ "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": CHROMIUM,
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--window-size=1280,900", user_data],
                },
            }}}))
            .send()
            .await?
            .json()
            .await?;
        match created["value"]["sessionId"].as_str() {
            Some(id) => driver.session = format!("{base}/session/{id}"),
            None => return Err(format!("no session: {created}").into()),
        }
        Ok(driver)
    }

    async fn command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Result<Value, BoxError> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.session));
        if method == reqwest::Method::POST {
            request = request.json(&body);
        }
        let answer: Value = request.send().await?.json().await?;
        if answer["value"].get("error").is_some() {
            return Err(format!("webdriver {path}: {answer}").into());
        }
        Ok(answer["value"].clone())
    }

    async fn go(&self, url: &str) -> Result<(), BoxError> {
        self.command(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await?;
        Ok(())
    }

    async fn url(&self) -> Result<String, BoxError> {
        let url = self
            .command(reqwest::Method::GET, "/url", json!({}))
            .await?;
        Ok(url.as_str().unwrap_or_default().to_owned())
    }

    /// Signs out whoever is signed in, and signs in with `token`.
    async fn sign_in_as(&self, server: &Server, token: &str) -> Result<(), BoxError> {
        self.go(&server.url("/")).await?;
        if self.url().await? != server.url("/login") {
            self.click("header form button").await?;
            self.arrive(&server.url("/login")).await?;
        }
        self.type_into("#token", token).await?;
        self.click("button[type=submit]").await?;
        self.arrive(&server.url("/")).await
    }

    /// Waits until the browser is at `url` (a bound on a hang of 30 s, not a timing assertion:
    /// a click's navigation may still be under way when the click answers).
    async fn arrive(&self, url: &str) -> Result<(), BoxError> {
        for _ in 0..300 {
            if self.url().await? == url {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "the browser never reached {url}; it is at {}",
            self.url().await?
        )
        .into())
    }

    async fn element(&self, css: &str) -> Result<String, BoxError> {
        let found = self
            .command(
                reqwest::Method::POST,
                "/element",
                json!({ "using": "css selector", "value": css }),
            )
            .await?;
        found
            .as_object()
            .and_then(|object| object.values().next())
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("no element {css}").into())
    }

    /// Waits until an element matches `css` (at most 60 s, a bound on a hang).
    async fn wait_for(&self, css: &str) -> Result<(), BoxError> {
        self.wait_until(|| self.has(css))
            .await
            .map_err(|_| format!("nothing matched {css}").into())
    }

    /// Waits until `probe` answers true (at most 60 s, a bound on a hang).
    async fn wait_until<F, Fut>(&self, probe: F) -> Result<(), BoxError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<bool, BoxError>>,
    {
        for _ in 0..600 {
            if probe().await? {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("the page never showed it".into())
    }

    /// How often the page's live script swapped in a fresh main part, once its stream is open
    /// and the refresh it makes on opening is done (so that later ones come from pulses).
    async fn refreshes(&self) -> Result<u32, BoxError> {
        self.wait_for("body[data-live=open][data-refreshed]")
            .await?;
        let count = self
            .on_element(
                "body",
                reqwest::Method::GET,
                "/attribute/data-refreshed",
                json!({}),
            )
            .await?;
        Ok(count.as_str().and_then(|n| n.parse().ok()).unwrap_or(0))
    }

    /// Waits until an element matches `css` (a page the browser is loading).
    async fn appears(&self, css: &str) -> Result<(), BoxError> {
        for _ in 0..300 {
            if self.has(css).await? {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("nothing matched {css} at {}", self.url().await?).into())
    }

    /// Whether the page has an element matching `css` now.
    async fn has(&self, css: &str) -> Result<bool, BoxError> {
        let found = self
            .command(
                reqwest::Method::POST,
                "/elements",
                json!({ "using": "css selector", "value": css }),
            )
            .await?;
        Ok(found.as_array().is_some_and(|all| !all.is_empty()))
    }

    /// Sends `method` `/element/ID{action}` to the element `css` matches, finding it again
    /// when a live update swapped it out in between (WebDriver's "stale element reference").
    async fn on_element(
        &self,
        css: &str,
        method: reqwest::Method,
        action: &str,
        body: Value,
    ) -> Result<Value, BoxError> {
        let mut tries = 0;
        loop {
            let element = self.element(css).await?;
            let path = format!("/element/{element}{action}");
            match self.command(method.clone(), &path, body.clone()).await {
                Err(error) if tries < 10 && error.to_string().contains("stale element") => {
                    tries += 1;
                }
                answer => return answer,
            }
        }
    }

    async fn type_into(&self, css: &str, text: &str) -> Result<(), BoxError> {
        self.on_element(
            css,
            reqwest::Method::POST,
            "/value",
            json!({ "text": text }),
        )
        .await?;
        Ok(())
    }

    async fn click(&self, css: &str) -> Result<(), BoxError> {
        self.on_element(css, reqwest::Method::POST, "/click", json!({}))
            .await?;
        Ok(())
    }

    async fn text(&self, css: &str) -> Result<String, BoxError> {
        let text = self
            .on_element(css, reqwest::Method::GET, "/text", json!({}))
            .await?;
        Ok(text.as_str().unwrap_or_default().to_owned())
    }

    async fn screenshot(&self, path: &PathBuf) -> Result<(), BoxError> {
        let png = self
            .command(reqwest::Method::GET, "/screenshot", json!({}))
            .await?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().ok_or("a base64 screenshot")?)?;
        std::fs::write(path, bytes)?;
        Ok(())
    }

    /// Ends the session (the browser quits); the process group goes with `self`.
    async fn stop(self) {
        if !self.session.is_empty() {
            let _ = self.http.delete(&self.session).send().await;
        }
    }
}

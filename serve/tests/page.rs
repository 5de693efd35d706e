//! The web page on both stores: a browser without a session is sent to sign in, a token no one
//! holds is refused, and a signed-in browser (whose cookie never holds the token) sees the
//! problems first, each linking to its consumer, the consumer's dead letters and the event's
//! attempts.

mod support;

use evc::{PgStore, SqliteStore};
use evc_serve::Outbox;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};

use support::{
    APPROVER, CONSUMER, OPERATOR, READER, Seeded, Server, TENANT_READER, TRACE, TestResult, seed,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pages_show_problems_first() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let seeded = seed(&store).await?;
        pages(
            Outbox::Postgres(Box::new(evc_serve::PgStores::single(store))),
            seeded,
        )
        .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pages_show_problems_first() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        let seeded = seed(&store).await?;
        pages(Outbox::Sqlite(store), seeded).await
    })
    .await
}

async fn pages(outbox: Outbox, seeded: Seeded) -> TestResult {
    let discards = matches!(outbox, Outbox::Postgres(_));
    let server = Server::start(outbox).await?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;

    let anonymous = http.get(server.url("/")).send().await?;
    assert_eq!(anonymous.status(), StatusCode::SEE_OTHER);
    assert_eq!(anonymous.headers()[LOCATION], "/login");
    let form = http.get(server.url("/login")).send().await?;
    assert_eq!(form.status(), StatusCode::OK);
    assert!(form.text().await?.contains("name=\"token\""));

    // Signing in is taken from this server's pages only.
    let cross_site = http
        .post(server.url("/login"))
        .header("sec-fetch-site", "cross-site")
        .form(&[("token", READER)])
        .send()
        .await?;
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    assert!(cross_site.headers().get(SET_COOKIE).is_none());

    let refused = http
        .post(server.url("/login"))
        .header("origin", server.base.as_str())
        .form(&[("token", "no-one-holds-this-token-at-all")])
        .send()
        .await?;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers().get(SET_COOKIE).is_none());
    assert!(refused.text().await?.contains("No caller holds this token"));

    // A token bound to a tenant signs in nowhere: it may use the realtime gateway only.
    let bound = http
        .post(server.url("/login"))
        .header("origin", server.base.as_str())
        .form(&[("token", TENANT_READER)])
        .send()
        .await?;
    assert_eq!(bound.status(), StatusCode::UNAUTHORIZED);
    assert!(bound.headers().get(SET_COOKIE).is_none());
    let anonymous_live = http.get(server.url("/live")).send().await?;
    assert_eq!(anonymous_live.status(), StatusCode::SEE_OTHER);

    // Behind a TLS proxy the browser's origin is https: the host and port are what count.
    let https_origin = server.base.replacen("http://", "https://", 1);
    let signed_in = http
        .post(server.url("/login"))
        .header("origin", https_origin.as_str())
        .form(&[("token", READER)])
        .send()
        .await?;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()[SET_COOKIE].to_str()?.to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(READER),
        "the cookie holds the token: {cookie}"
    );
    assert!(cookie.contains("Max-Age="), "{cookie}");
    let session = cookie.split(';').next().ok_or("a cookie")?.to_owned();
    let page = |path: &str| {
        http.get(server.url(path))
            .header(COOKIE, session.as_str())
            .send()
    };

    let digest = session.split('.').next().ok_or("a digest")?;
    let forged = http
        .get(server.url("/"))
        .header(COOKIE, digest)
        .send()
        .await?;
    assert_eq!(
        forged.status(),
        StatusCode::SEE_OTHER,
        "a digest without its signature"
    );

    let problems = page("/").await?;
    assert_eq!(problems.status(), StatusCode::OK);
    let policy = problems.headers()["content-security-policy"].to_str()?;
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(
        policy.contains("script-src 'self';") && !policy.contains("unsafe-eval"),
        "{policy}"
    );
    let live = page("/live").await?;
    assert_eq!(live.status(), StatusCode::OK);
    assert_eq!(live.headers()["content-type"], "text/event-stream");
    drop(live);
    let script = page("/live.js").await?;
    assert_eq!(script.status(), StatusCode::OK);
    assert!(script.text().await?.contains("new EventSource(\"/live\")"));
    let html = problems.text().await?;
    let first_problem = html.find("id=\"problems\"").ok_or("a problems list")?;
    let consumers_table = html.find("id=\"consumers\"").ok_or("a consumers table")?;
    assert!(first_problem < consumers_table, "problems come first");
    let link = format!("<a href=\"/consumers/{CONSUMER}\">");
    let problem_link = html[first_problem..]
        .find(&link)
        .ok_or("a linked problem")?;
    assert!(first_problem + problem_link < consumers_table, "{html}");
    assert!(html.contains(">ada<"), "the viewer's name");

    let consumer = page(&format!("/consumers/{CONSUMER}")).await?;
    assert_eq!(consumer.status(), StatusCode::OK);
    let html = consumer.text().await?;
    assert!(html.contains(&format!("/events/{}", seeded.dead)), "{html}");
    assert!(
        !html.contains(&seeded.acked.to_string()),
        "only dead letters are listed"
    );
    assert!(
        !html.contains("id=\"gate\""),
        "a consumer without a gate shows none"
    );
    // A consumer with a cut-over gate shows its progress in counts, to every viewer.
    let gated = page("/consumers/worker.ai.review_suggest").await?;
    let html = gated.text().await?;
    assert!(
        html.contains("Cut-over gate: 0 of 30 compared deliveries over 3d"),
        "{html}"
    );

    let event = page(&format!("/events/{}", seeded.dead)).await?;
    assert_eq!(event.status(), StatusCode::OK);
    let html = event.text().await?;
    assert!(html.contains("mailbox_rejected"));
    assert!(
        html.contains(&format!("href=\"/timeline/{TRACE}\"")),
        "{html}"
    );

    let timeline = page(&format!("/timeline/{TRACE}")).await?;
    assert_eq!(timeline.status(), StatusCode::OK);
    let html = timeline.text().await?;
    for id in [seeded.dead, seeded.acked] {
        assert!(html.contains(&format!("/events/{id}")), "{html}");
    }
    let born = page("/event-types/iu.born").await?;
    assert_eq!(born.status(), StatusCode::OK);
    let html = born.text().await?;
    assert!(
        html.contains("id=\"v1.0.0\"") && html.contains("id=\"v1.1.0\""),
        "{html}"
    );
    assert!(html.contains(&format!("/consumers/{CONSUMER}")));
    let schema = html.find("<pre>").map_or("", |at| &html[at..]);
    assert!(
        schema.contains("&#34;type&#34;: &#34;object&#34;"),
        "the schema, escaped: {schema}"
    );
    assert_eq!(
        page("/event-types/no.such").await?.status(),
        StatusCode::NOT_FOUND
    );
    // The last two versions' schemas, compared line by line; any two on request.
    let diff = html.find("id=\"diff\"").map_or("", |at| &html[at..]);
    assert!(diff.contains("from 1.1.0 to 2.0.0"), "{html}");
    assert!(
        diff.contains("<span class=\"del\">- "),
        "2.0.0 drops axis_count: {diff}"
    );
    let added = page("/event-types/iu.born?from=1.0.0&to=1.1.0")
        .await?
        .text()
        .await?;
    assert!(added.contains("<span class=\"ins\">+ "), "{added}");
    assert!(
        !added.contains("<span class=\"del\">"),
        "1.1.0 only adds: {added}"
    );
    let back = page("/event-types/iu.born?from=1.1.0&to=1.0.0")
        .await?
        .text()
        .await?;
    assert!(back.contains("<span class=\"del\">- "), "{back}");
    assert!(!back.contains("<span class=\"ins\">"), "{back}");
    // A refusal is a page too, with the status and what was wrong.
    for (query, status, detail) in [
        (
            "?from=1.0.0&to=9.9.9",
            StatusCode::NOT_FOUND,
            "version `9.9.9` does not exist",
        ),
        ("?from=1.0.0", StatusCode::BAD_REQUEST, "name both versions"),
    ] {
        let answer = page(&format!("/event-types/iu.born{query}")).await?;
        assert_eq!(answer.status(), status, "{query}");
        assert!(
            answer.headers()["content-type"]
                .to_str()?
                .starts_with("text/html")
        );
        assert!(answer.headers().contains_key("content-security-policy"));
        let html = answer.text().await?;
        assert!(
            html.contains("id=\"detail\"") && html.contains(detail),
            "{html}"
        );
    }

    // Forms: only from this server's pages, and only by a role whose job it is.
    let propose = server.url(&format!("/consumers/{CONSUMER}/replay/propose"));
    let cross_site = http
        .post(&propose)
        .header(COOKIE, session.as_str())
        .header("origin", "http://evil.example")
        .send()
        .await?;
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    let as_reader = http
        .post(&propose)
        .header(COOKIE, session.as_str())
        .header("origin", server.base.as_str())
        .send()
        .await?;
    assert_eq!(as_reader.status(), StatusCode::FORBIDDEN);
    let html = page(&format!("/consumers/{CONSUMER}"))
        .await?
        .text()
        .await?;
    assert!(!html.contains("id=\"propose\"") && !html.contains("id=\"approve\""));
    assert!(!html.contains("id=\"pause\""), "a reader pauses nothing");
    let pause = server.url(&format!("/consumers/{CONSUMER}/pause"));
    let as_reader = http
        .post(&pause)
        .header(COOKIE, session.as_str())
        .header("origin", server.base.as_str())
        .form(&[("reason", "curious")])
        .send()
        .await?;
    assert_eq!(as_reader.status(), StatusCode::FORBIDDEN);

    // An operator pauses and resumes from the page, each time saying why; the page shows the
    // record, and a change without a reason is refused.
    let operator = sign_in(&http, &server, OPERATOR).await?;
    let post = |path: &str, reason: &'static str| {
        http.post(server.url(path))
            .header(COOKIE, operator.as_str())
            .header("origin", server.base.as_str())
            .form(&[("reason", reason)])
            .send()
    };
    let html = http
        .get(server.url(&format!("/consumers/{CONSUMER}")))
        .header(COOKIE, operator.as_str())
        .send()
        .await?
        .text()
        .await?;
    assert!(html.contains("id=\"pause\"") && !html.contains("id=\"resume\""));
    let unparsed = http
        .post(server.url(&format!("/consumers/{CONSUMER}/pause")))
        .header(COOKIE, operator.as_str())
        .header("origin", server.base.as_str())
        .form(&[("why", "no reason field")])
        .send()
        .await?;
    assert_eq!(unparsed.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(unparsed.text().await?.contains("id=\"detail\""));
    let refused = post(&format!("/consumers/{CONSUMER}/pause"), "  ").await?;
    let refused = follow(&http, &server, &operator, refused).await?;
    assert!(refused.contains("id=\"notice\">Refused:"), "{refused}");
    let paused = post(&format!("/consumers/{CONSUMER}/pause"), "the relay is down").await?;
    let paused = follow(&http, &server, &operator, paused).await?;
    assert!(paused.contains("id=\"notice\">Paused"), "{paused}");
    assert!(paused.contains("the relay is down") && paused.contains(">bob<"));
    assert!(paused.contains("id=\"resume\"") && !paused.contains("id=\"pause\""));
    let resumed = post(
        &format!("/consumers/{CONSUMER}/resume"),
        "the relay is back",
    )
    .await?;
    let resumed = follow(&http, &server, &operator, resumed).await?;
    assert!(resumed.contains("id=\"notice\">Resumed"), "{resumed}");
    assert!(resumed.contains("the relay is back"));
    // Shown once: the page again, without the post's cookie, has no notice.
    let again = http
        .get(server.url(&format!("/consumers/{CONSUMER}")))
        .header(COOKIE, operator.as_str())
        .send()
        .await?
        .text()
        .await?;
    assert!(!again.contains("id=\"notice\""), "{again}");
    // A notice this process did not sign is not shown.
    let forged = http
        .get(server.url(&format!("/consumers/{CONSUMER}")))
        .header(
            COOKIE,
            format!("{operator}; evc_notice=4f6b.00112233").as_str(),
        )
        .send()
        .await?
        .text()
        .await?;
    assert!(!forged.contains("id=\"notice\""), "{forged}");

    discard_from_the_page(&http, &server, &operator, discards, &seeded).await?;

    let out = http
        .post(server.url("/logout"))
        .header(COOKIE, session.as_str())
        .header("sec-fetch-site", "same-origin")
        .send()
        .await?;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(out.headers()[SET_COOKIE].to_str()?.contains("Max-Age=0"));
    Ok(())
}

/// Follows a form post's redirect back to the consumer's page with the post's notice cookie,
/// as a browser does: the page's HTML, after checking that the page clears the cookie.
async fn follow(
    http: &reqwest::Client,
    server: &Server,
    session: &str,
    posted: reqwest::Response,
) -> Result<String, support::BoxError> {
    assert_eq!(
        posted.status(),
        StatusCode::SEE_OTHER,
        "POST, redirect, GET"
    );
    let location = posted.headers()[LOCATION].to_str()?.to_owned();
    assert_eq!(location, format!("/consumers/{CONSUMER}"));
    let set = posted.headers()[SET_COOKIE].to_str()?;
    assert!(
        set.starts_with("evc_notice=")
            && set.contains("HttpOnly")
            && set.contains("SameSite=Strict"),
        "{set}"
    );
    let notice = set.split(';').next().ok_or("a cookie")?.to_owned();
    let page = http
        .get(server.url(&location))
        .header(COOKIE, format!("{session}; {notice}").as_str())
        .send()
        .await?;
    assert_eq!(page.status(), StatusCode::OK);
    let cleared = page.headers()[SET_COOKIE].to_str()?;
    assert!(
        cleared.starts_with("evc_notice=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    Ok(page.text().await?)
}

/// Two people discard the dead letter from the page on PostgreSQL: bob proposes, eve reads the
/// digest and approves. A SQLite outbox says it has no discard.
async fn discard_from_the_page(
    http: &reqwest::Client,
    server: &Server,
    operator: &str,
    discards: bool,
    seeded: &Seeded,
) -> TestResult {
    let consumer_page = format!("/consumers/{CONSUMER}");
    let get = |session: &str| {
        http.get(server.url(&consumer_page))
            .header(COOKIE, session)
            .send()
    };
    let html = get(operator).await?.text().await?;
    assert_eq!(html.contains("id=\"propose-discard\""), discards, "{html}");
    assert_eq!(html.contains("id=\"no-discard\""), !discards, "{html}");
    let proposed = http
        .post(server.url(&format!("{consumer_page}/discard/propose")))
        .header(COOKIE, operator)
        .header("origin", server.base.as_str())
        .send()
        .await?;
    let html = follow(http, server, operator, proposed).await?;
    if !discards {
        assert!(
            html.contains("id=\"notice\">Refused: a SQLite outbox has no discard"),
            "{html}"
        );
        return Ok(());
    }
    assert!(
        html.contains("id=\"notice\">Proposed discard plan"),
        "{html}"
    );

    let approver = sign_in(http, server, APPROVER).await?;
    let html = get(&approver).await?.text().await?;
    let form = html
        .find("id=\"approve-discard\"")
        .map(|at| &html[at..])
        .ok_or("the discard's approval form")?;
    let digest = form
        .split("name=\"digest\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .ok_or("the plan's digest")?
        .to_owned();
    let apply = server.url(&format!("{consumer_page}/discard/apply"));
    let fields = [
        ("digest", digest.as_str()),
        ("reason", "the mailbox is gone for good"),
        ("approval_ref", "CHG-9"),
    ];
    let as_operator = http
        .post(&apply)
        .header(COOKIE, operator)
        .header("origin", server.base.as_str())
        .form(&fields)
        .send()
        .await?;
    assert_eq!(as_operator.status(), StatusCode::FORBIDDEN);
    let applied = http
        .post(&apply)
        .header(COOKIE, approver.as_str())
        .header("origin", server.base.as_str())
        .form(&fields)
        .send()
        .await?;
    let html = follow(http, server, &approver, applied).await?;
    assert!(html.contains("id=\"notice\">Applied discard"), "{html}");
    assert!(html.contains("id=\"no-dead-letters\""), "{html}");
    assert!(
        !html.contains(&format!("/events/{}", seeded.dead)),
        "{html}"
    );
    Ok(())
}

/// A session cookie (`name=value`) for `token`.
async fn sign_in(
    http: &reqwest::Client,
    server: &Server,
    token: &str,
) -> Result<String, support::BoxError> {
    let signed_in = http
        .post(server.url("/login"))
        .header("origin", server.base.as_str())
        .form(&[("token", token)])
        .send()
        .await?;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()[SET_COOKIE].to_str()?;
    Ok(cookie.split(';').next().ok_or("a cookie")?.to_owned())
}

/// A server whose registry the database no longer holds lists the drift first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_problems_list_registry_drift_first() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        const OTHER: &str = "1111111111111111111111111111111111111111111111111111111111111111";
        let server = Server::start(support::drifted(&store, OTHER)?).await?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let session = sign_in(&http, &server, READER).await?;
        let html = http
            .get(server.url("/"))
            .header(COOKIE, session.as_str())
            .send()
            .await?
            .text()
            .await?;
        let first = html.find("<li>").map_or("", |at| &html[at..]);
        assert!(first.starts_with("<li>registry drift: "), "{html}");
        assert!(first.contains(OTHER), "{first}");
        Ok(())
    })
    .await
}

/// An append the outbox refused is a problem on the first page, linking to its event type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_problems_list_refused_appends_by_type() -> TestResult {
    use evc_runtime::{AppendOptions, OutgoingEvent, TraceContext};

    support::with_sqlite(|store: SqliteStore| async move {
        let trace = TraceContext::new(TRACE, "00f067aa0ba902b7", 1)?;
        let mut tx = store.begin().await?;
        // `unit_id` must be a UUID string: the schema refuses a number.
        let refused = OutgoingEvent::new(
            "iu.born",
            "1.0.0",
            None,
            &trace,
            &serde_json::json!({"unit_id": 7}),
        )?;
        let error = store
            .append(&mut tx, refused, AppendOptions::default())
            .await
            .expect_err("the schema refuses it");
        assert_eq!(
            error.rejection().map(|r| r.reason_code()),
            Some("schema_violation")
        );
        tx.rollback().await?;

        let server = Server::start(Outbox::Sqlite(store)).await?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let session = sign_in(&http, &server, READER).await?;
        // The reject row is written on its own task, just after the refusal.
        let line =
            "<a href=\"/event-types/iu.born\">iu.born: 1 append refused (schema_violation)</a>";
        for _ in 0..100 {
            let html = http
                .get(server.url("/"))
                .header(COOKIE, session.as_str())
                .send()
                .await?
                .text()
                .await?;
            if html.contains(line) {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(format!("the problems page never listed: {line}").into())
    })
    .await
}

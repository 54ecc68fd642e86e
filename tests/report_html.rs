//! `report.html` opens from a file in a real browser: a sweep of the shipped demo is rendered by
//! headless Chromium (Debian's `chromium` package, installed by scripts/setup.sh) into a
//! screenshot, which must be a PNG of the window's size with the figures drawn (many distinct
//! colours where they are), and the page must load nothing from outside the file.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{capsim, text};

const WIDTH_PX: u32 = 1280;
const HEIGHT_PX: u32 = 2000;

/// The browser, or `None` outside CI when it is missing (in CI a missing browser fails).
fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is missing but CI is set: the report.html screenshot test needs Debian's \
             chromium package (scripts/setup.sh installs it: apt-get install -y chromium)"
        );
        eprintln!("skipped: chromium is not installed (scripts/setup.sh installs it)");
    }
    found
}

/// A small sweep of the shipped demo scenario and trace into `dir/sweep`.
fn demo_sweep(dir: &Path) -> PathBuf {
    let out = dir.join("sweep");
    let output = capsim(&[
        "sweep",
        "--scenario",
        "scenarios/bert-dynamic-batching.toml",
        "traces/demo.parquet",
        "--limit",
        "6000",
        "--load",
        "0.5..16x:log6",
        "--grid",
        "instances=1,2",
        "--slo",
        "e2e.p99<=100ms",
        "--growth",
        "4x",
        "--seeds",
        "2",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("Answer: for 4x today's traffic") && stdout.contains("instances"),
        "the sweep prints the one-sentence answer:\n{}",
        text(&output)
    );
    out
}

/// Every `src=`/`href=`/`url(` target in `html` that is not a data URI or a fragment.
fn external_references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for marker in ["src=\"", "href=\"", "url("] {
        for (i, _) in html.match_indices(marker) {
            let rest = &html[i + marker.len()..];
            let target: String = rest
                .chars()
                .take_while(|c| !matches!(c, '"' | ')'))
                .collect();
            if !target.starts_with("data:") && !target.starts_with('#') {
                found.push(target.chars().take(80).collect());
            }
        }
    }
    for scheme in ["http://", "https://", "//cdn", "file://"] {
        if html.contains(scheme) {
            found.push(format!("text contains {scheme}"));
        }
    }
    found
}

#[test]
fn report_html_is_self_contained_and_renders_its_figures_in_headless_chromium() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = demo_sweep(dir.path());
    let html_path = out.join("report.html");
    let html = std::fs::read_to_string(&html_path).expect("report.html written");
    let external = external_references(&html);
    assert!(
        external.is_empty(),
        "report.html must load nothing from outside the file, found: {external:?}"
    );
    assert!(
        html.contains("data:image/png;base64,"),
        "report.html embeds no figure"
    );
    let question = html.find("<h2>Question</h2>").expect("a Question section");
    let answer = html.find("<h2>Answer</h2>").expect("an Answer section");
    let evidence = html.find("<h2>Evidence</h2>").expect("an Evidence section");
    let basis = html
        .find("<h2>What the answer rests on</h2>")
        .expect("a What the answer rests on section");
    assert!(
        question < answer && answer < evidence && evidence < basis,
        "sections out of order: question {question}, answer {answer}, evidence {evidence}, basis {basis}"
    );

    let Some(browser) = chromium() else {
        return;
    };
    let profile = tempfile::tempdir().expect("tempdir");
    let shot = dir.path().join("report.png");
    let run = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("--window-size={WIDTH_PX},{HEIGHT_PX}"))
        .arg(format!("file://{}", html_path.display()))
        .output()
        .expect("chromium runs");
    assert!(
        run.status.success() && shot.exists(),
        "chromium --screenshot failed ({:?}): {}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    if let Ok(keep) = std::env::var("CAPSIM_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, &keep).expect("screenshot copied");
    }

    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("screenshot"),
    ));
    let mut reader = decoder.read_info().expect("the screenshot is a PNG");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).expect("PNG frame");
    assert_eq!(
        (frame.width, frame.height),
        (WIDTH_PX, HEIGHT_PX),
        "screenshot size"
    );
    let channels = frame.color_type.samples();
    assert!(
        channels >= 3 && frame.bit_depth == png::BitDepth::Eight,
        "expected 8-bit RGB(A), got {:?} {:?}",
        frame.color_type,
        frame.bit_depth
    );
    // The first figure sits below the question and the answer; count the colours in the lower
    // three quarters of the page, where the figures are.
    let stride = frame.width as usize * channels;
    let mut colours = std::collections::BTreeSet::new();
    let mut non_white = 0usize;
    for y in (HEIGHT_PX as usize / 4)..HEIGHT_PX as usize {
        let row = &pixels[y * stride..(y + 1) * stride];
        for px in row.chunks(channels) {
            colours.insert((px[0] >> 3, px[1] >> 3, px[2] >> 3));
            if px[0] < 240 || px[1] < 240 || px[2] < 240 {
                non_white += 1;
            }
        }
    }
    let area = (HEIGHT_PX as usize * 3 / 4) * WIDTH_PX as usize;
    assert!(
        colours.len() >= 20,
        "the figures' area holds only {} distinct colours: blank or not drawn",
        colours.len()
    );
    assert!(
        non_white * 100 >= area,
        "only {non_white} of {area} pixels in the figures' area are not white"
    );
}

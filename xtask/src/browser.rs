//! The browser of the web console's tests (`tests/tests/browser.rs`): Debian's
//! `chromium` and `chromium-driver` (chromedriver), driven over WebDriver. No test tool
//! downloads a browser of its own.
//!
//! `cargo xtask browser` installs the two packages when they are missing (apt-get, as
//! root) and prints their paths; `cargo xtask test` does the same as set-up and names
//! them to the tests (`SLUICE_CHROMIUM`, `SLUICE_CHROMEDRIVER`). Where they cannot be
//! installed (not root, no apt, offline) that is a warning and the browser test skips
//! saying why, unless `SLUICE_REQUIRE_BROWSER=1` or `CI=true` makes it an error.
//! `cargo xtask screenshots` runs the browser test with `SLUICE_SCREENSHOTS=docs/img`,
//! which saves the console's screenshots that the README shows.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{build_functions, cmd};

/// Where Debian's packages put the browser and its driver.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The variables that name them to the tests.
pub const CHROMIUM_VAR: &str = "SLUICE_CHROMIUM";
pub const CHROMEDRIVER_VAR: &str = "SLUICE_CHROMEDRIVER";

/// The browser and its driver.
pub struct Browser {
    pub chromium: PathBuf,
    pub driver: PathBuf,
}

impl Browser {
    /// Names the browser to a test command.
    pub fn apply(&self, command: &mut Command) {
        command.env(CHROMIUM_VAR, &self.chromium).env(CHROMEDRIVER_VAR, &self.driver);
    }
}

/// `cargo xtask browser`: installs the browser if needed and prints its paths.
pub fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("browser: unknown argument `{arg}`");
    }
    let browser = ensure()?;
    println!("{}\n{}", browser.chromium.display(), browser.driver.display());
    Ok(())
}

/// The installed browser, installing Debian's packages first if they are missing.
pub fn ensure() -> Result<Browser> {
    if let Some(browser) = installed() {
        return Ok(browser);
    }
    let root = cmd::output(Command::new("id").arg("-u")).map(|uid| uid.trim() == "0").unwrap_or(false);
    if !root {
        bail!("Chromium is not installed and this is not root: `sudo apt-get install chromium chromium-driver`");
    }
    let install = || {
        cmd::run(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", "chromium", "chromium-driver"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    if install().is_err() {
        // A fresh machine's package lists may be missing or stale.
        cmd::run(Command::new("apt-get").arg("update")).context("apt-get update")?;
        install().context("installing chromium and chromium-driver")?;
    }
    installed().context("apt-get installed chromium and chromium-driver, but they are not in /usr/bin")
}

fn installed() -> Option<Browser> {
    let (chromium, driver) = (Path::new(CHROMIUM), Path::new(CHROMEDRIVER));
    (chromium.is_file() && driver.is_file())
        .then(|| Browser { chromium: chromium.to_path_buf(), driver: driver.to_path_buf() })
}

/// [`ensure`] for `cargo xtask test`: a failure is a warning (the browser test then
/// skips, saying why) unless `SLUICE_REQUIRE_BROWSER=1` or `CI=true`.
pub fn ensure_for_tests() -> Result<Option<Browser>> {
    match ensure() {
        Ok(browser) => Ok(Some(browser)),
        Err(e) if !required() => {
            eprintln!("xtask: warning: no browser for the console's tests ({e:#}); they will skip");
            Ok(None)
        }
        Err(e) => Err(e.context("SLUICE_REQUIRE_BROWSER=1 or CI=true")),
    }
}

fn required() -> bool {
    std::env::var("SLUICE_REQUIRE_BROWSER").as_deref() == Ok("1") || std::env::var("CI").as_deref() == Ok("true")
}

/// `cargo xtask screenshots`: the browser test, saving the console's screenshots in
/// `docs/img/`.
pub fn screenshots(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("screenshots: unknown argument `{arg}`");
    }
    build_functions::run(&[])?;
    let browser = ensure()?;
    let mut test = cmd::cargo();
    test.current_dir(cmd::repo_root())
        .args(["test", "-p", "sluice-tests", "--test", "browser", "--", "--nocapture"])
        .env("SLUICE_SCREENSHOTS", "docs/img")
        .env("SLUICE_REQUIRE_BROWSER", "1");
    browser.apply(&mut test);
    cmd::run(&mut test)
}

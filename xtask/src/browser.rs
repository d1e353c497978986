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

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use crate::debian::{self, Tool};
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

/// Debian's Chromium and its driver.
const CHROMIUM_TOOL: Tool = Tool {
    what: "Chromium",
    packages: &["chromium", "chromium-driver"],
    files: &[CHROMIUM, CHROMEDRIVER],
    require_var: "SLUICE_REQUIRE_BROWSER",
};

/// The installed browser, installing Debian's packages first if they are missing.
pub fn ensure() -> Result<Browser> {
    debian::ensure(&CHROMIUM_TOOL)?;
    Ok(Browser { chromium: PathBuf::from(CHROMIUM), driver: PathBuf::from(CHROMEDRIVER) })
}

/// [`ensure`] for `cargo xtask test`: a failure is a warning (the browser test then
/// skips, saying why) unless `SLUICE_REQUIRE_BROWSER=1` or `CI=true`.
pub fn ensure_for_tests() -> Result<Option<Browser>> {
    Ok(debian::ensure_for_tests(&CHROMIUM_TOOL)?
        .map(|_| Browser { chromium: PathBuf::from(CHROMIUM), driver: PathBuf::from(CHROMEDRIVER) }))
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

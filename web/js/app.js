// The console's shell: sign-in with an API key (kept in sessionStorage), and the
// pages (#/live, #/functions, #/demos) rendered into #page.

import { Api, ApiError, storedKey, storeKey } from "./api.js";
import { LivePage } from "./live.js";
import { FunctionsPage } from "./functions.js";
import { DemosPage } from "./digits.js";

const PAGES = { live: LivePage, functions: FunctionsPage, demos: DemosPage };

const $ = (id) => document.getElementById(id);

/** Who is signed in: {api, admin, tenant} or null. */
let session = null;
let page = null;

async function signIn(key) {
  const api = new Api(key);
  const status = await api.get("/v1/status");
  // The admin's status names the engine; a tenant's shows its own usage only.
  const admin = "engine_fingerprint" in status;
  // A tenant's own usage names it once it has deployed or run something.
  const tenant = admin ? null : (status.tenants[0] && status.tenants[0].tenant) || null;
  return { api, admin, tenant, devices: status.devices.length };
}

function showSignIn(message) {
  session = null;
  stopPage();
  $("signin").hidden = false;
  $("nav").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  $("page").replaceChildren();
  $("signin-error").textContent = message || "";
  $("key").focus();
}

function stopPage() {
  if (page) page.stop();
  page = null;
}

function route() {
  if (!session) return;
  const asked = location.hash.replace(/^#\//, "");
  const name = Object.hasOwn(PAGES, asked) ? asked : "live";
  for (const n of Object.keys(PAGES)) $(`nav-${n}`).classList.toggle("active", n === name);
  stopPage();
  const root = $("page");
  root.replaceChildren();
  page = new PAGES[name](root, session);
  page.start();
}

async function start(key) {
  try {
    session = await signIn(key);
  } catch (e) {
    storeKey(null);
    const why = e instanceof ApiError && e.status === 401 ? "Unknown or revoked API key." : `Sign-in failed: ${e.message}`;
    showSignIn(why);
    return;
  }
  storeKey(key);
  $("signin").hidden = true;
  $("nav").hidden = false;
  $("sign-out").hidden = false;
  $("who").textContent = session.admin ? "admin" : `tenant ${session.tenant || ""}`.trim();
  route();
}

$("signin-form").addEventListener("submit", (e) => {
  e.preventDefault();
  start($("key").value.trim());
});
$("sign-out").addEventListener("click", () => {
  storeKey(null);
  showSignIn();
});
window.addEventListener("hashchange", route);

const key = storedKey();
if (key) start(key);
else showSignIn();

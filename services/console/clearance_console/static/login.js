// The console's login: the token, typed or in the URL fragment (/login#token=...,
// which the browser never sends anywhere), is posted once for a session cookie.
"use strict";

async function logIn(token) {
  const result = document.getElementById("login-result");
  const response = await fetch("/login", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token }) });
  if (response.ok) {
    location.replace("/");  // replaces this entry: the fragment leaves the history
    return;
  }
  const data = await response.json().catch(() => ({}));
  result.textContent = (data.error && data.error.message) || ("HTTP " + response.status);
}

function fromFragment() {
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  if (token) {
    history.replaceState(null, "", "/login");
    logIn(token);
  }
}

fromFragment();
window.addEventListener("hashchange", fromFragment);  // a new #token on this very page
document.getElementById("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  logIn(new FormData(event.target).get("token"));
});

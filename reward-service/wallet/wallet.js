// The reference wallet page (see reward_service::page for what it does and why).
// Plain JavaScript, no build step, no library; talks only to this origin.
"use strict";

(function () {
  const SESSION_KEY = "reward-wallet:session";
  const $ = (id) => document.getElementById(id);
  // `gen` counts starts: a load begun for an earlier session never renders.
  // `seq` counts loads: only the latest one renders (a code added during a
  // withdrawal must not paint the list as it was before the credits).
  const state = { session: null, who: null, page: null, busy: false, gen: 0, seq: 0 };
  // What a reward code looks like (base64url of a sealed token); anything else is
  // refused when added, so one bad entry cannot make every later load fail.
  const CODE = /^[A-Za-z0-9_-]{16,16384}$/;

  // ---- session: from the fragment once, then from this tab's storage ----
  function takeSession() {
    const m = /(?:^|[#&])session=([^&]+)/.exec(location.hash);
    if (m) {
      let s;
      try { s = decodeURIComponent(m[1]); } catch (_) { s = m[1]; }
      try { sessionStorage.setItem(SESSION_KEY, s); } catch (_) { /* private mode */ }
      // The session leaves the address bar (and any bookmark or screen share).
      history.replaceState(null, "", location.pathname + location.search);
      return s;
    }
    try { return sessionStorage.getItem(SESSION_KEY); } catch (_) { return null; }
  }

  // ---- the codes the app kept on this device ----
  function keptKey() {
    return "reward-wallet:" + state.who.activity_id + ":" + state.who.user_id;
  }
  function kept() {
    try {
      const v = JSON.parse(localStorage.getItem(keptKey()) || "[]");
      return Array.isArray(v) ? v.filter((t) => typeof t === "string" && CODE.test(t)) : [];
    } catch (_) {
      return [];
    }
  }
  function keep(code) {
    const all = kept();
    if (!all.includes(code)) {
      all.push(code);
      localStorage.setItem(keptKey(), JSON.stringify(all));
    }
  }

  // ---- the API ----
  class ApiError extends Error {
    constructor(status, code, reason) {
      super(reason || code);
      this.status = status;
      this.code = code;
    }
  }
  // "offline": the browser says so; "unreachable": it is online, the service did not answer.
  class Offline extends Error {}

  async function api(method, path, body) {
    if (navigator.onLine === false) throw new Offline("offline");
    let resp;
    try {
      resp = await fetch(path, {
        method,
        headers: Object.assign(
          { Authorization: "Bearer " + state.session },
          body ? { "Content-Type": "application/json" } : {}
        ),
        body: body ? JSON.stringify(body) : undefined,
        cache: "no-store",
        credentials: "omit",
      });
    } catch (_) {
      throw new Offline("unreachable");
    }
    let data = null;
    try { data = await resp.json(); } catch (_) { data = null; }
    if (!resp.ok) {
      throw new ApiError(resp.status, (data && data.error) || "http_" + resp.status, data && data.reason);
    }
    return data;
  }

  // Batches within the service's limits: at most `max_tokens` codes and, with room
  // for the rest of the body, `max_body_bytes`.
  function chunks(list) {
    const n = Math.max(1, state.who.max_tokens || 1);
    const max = state.who.max_body_bytes || 16384;
    const bytes = max > 2048 ? max - 1024 : Math.floor(max / 2);
    const out = [];
    let cur = [];
    let size = 0;
    for (const t of list) {
      if (cur.length > 0 && (cur.length >= n || size + t.length + 3 > bytes)) {
        out.push(cur);
        cur = [];
        size = 0;
      }
      cur.push(t);
      size += t.length + 3;
    }
    if (cur.length > 0) out.push(cur);
    return out;
  }

  // A user id as one path segment ("." and ".." would be folded by the browser).
  function segment(id) {
    return encodeURIComponent(id).replace(/\./g, "%2E");
  }

  // The server's list merged with every kept code. The first batch of kept codes
  // goes with the page request (the server merges it); further batches are checked
  // one by one and merged here the same way, by trade number.
  async function load() {
    const who = state.who;
    const [first, ...rest] = chunks(kept());
    const page = await api("POST", "/v1/users/" + segment(who.user_id) + "/rewards", {
      activity_id: who.activity_id,
      tokens: first || [],
    });
    const seen = new Set(page.pending.concat(page.credited).map((t) => t.trade_no));
    (page.expired_trade_nos || []).forEach((t) => seen.add(t));
    (page.refused_trade_nos || []).forEach((t) => seen.add(t));
    page.refused = page.refused || 0;
    const unknown = new Set(page.unknown.map((t) => t.trade_no));
    for (const batch of rest) {
      const v = await api("POST", "/v1/tokens/validate", {
        user_id: who.user_id, activity_id: who.activity_id, tokens: batch,
      });
      v.results.forEach((r, i) => {
        if (!r.token) { page.illegal += 1; return; }
        const t = r.token;
        if (seen.has(t.trade_no)) return;
        if (r.validity === "legal") {
          seen.add(t.trade_no);
          if (r.credited) page.credited.push(t);
          else if (r.creditable === false) page.refused += 1;
          else page.pending.push(Object.assign({ sealed: batch[i] }, t));
        } else if (r.validity === "expired") {
          seen.add(t.trade_no);
          page.expired += 1;
        } else if (!unknown.has(t.trade_no)) {
          unknown.add(t.trade_no);
          page.unknown.push(t);
        }
      });
    }
    // The balance from the merged lists (the server's, when one request sufficed).
    const balance = {};
    const add = (t, field) => {
      const b = balance[t.reward_type] || (balance[t.reward_type] = { pending: 0, credited: 0, total: 0 });
      b[field] += t.amount;
      b.total += t.amount;
    };
    page.pending.forEach((t) => add(t, "pending"));
    page.credited.forEach((t) => add(t, "credited"));
    page.balance = balance;
    return page;
  }

  // ---- rendering ----
  const fmt = new Intl.NumberFormat();
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const k of kids) e.append(k);
    return e;
  }
  function when(ms) {
    return ms > 0 ? new Date(ms).toLocaleString() : "";
  }

  function status(text, kind) {
    const s = $("status");
    s.textContent = text;
    if (kind) s.dataset.kind = kind; else delete s.dataset.kind;
  }

  function showProblem(title, text, canRetry) {
    $("problem-title").textContent = title;
    $("problem-text").textContent = text;
    $("retry").hidden = !canRetry;
    $("problem").hidden = false;
    $("problem").dataset.code = "";
  }

  function rewardItem(t, st) {
    return el(
      "li",
      { "data-trade": t.trade_no, "data-state": st },
      el("span", { class: "what" }, t.description || t.reward_type),
      el("span", { class: "amount" }, fmt.format(t.amount) + " " + t.reward_type),
      el(
        "span",
        { class: "meta" },
        el("span", { class: "state", "data-state": st }, st === "credited" ? "Credited" : "On its way"),
        " · " + when(t.grant_time_ms) + " · " + t.trade_no
      )
    );
  }

  function render(page) {
    state.page = page;
    const body = $("balance").querySelector("tbody");
    body.replaceChildren();
    const types = Object.keys(page.balance).sort();
    for (const ty of types) {
      const b = page.balance[ty];
      body.append(
        el(
          "tr",
          { "data-type": ty },
          el("th", { scope: "row" }, ty),
          el("td", { class: "credited" }, fmt.format(b.credited)),
          el("td", { class: "pending" }, fmt.format(b.pending)),
          el("td", { class: "total" }, fmt.format(b.total))
        )
      );
    }
    $("balance").hidden = types.length === 0;
    // Newest first, as a user remembers winning them.
    const newest = (a, b) => b.grant_time_ms - a.grant_time_ms || (a.trade_no < b.trade_no ? -1 : 1);
    $("pending").replaceChildren(...page.pending.slice().sort(newest).map((t) => rewardItem(t, "pending")));
    $("credited").replaceChildren(...page.credited.slice().sort(newest).map((t) => rewardItem(t, "credited")));
    $("pending-count").textContent = "(" + page.pending.length + ")";
    $("credited-count").textContent = "(" + page.credited.length + ")";
    $("empty").hidden = page.pending.length + page.credited.length > 0;
    $("withdraw").disabled = state.busy || page.pending.length === 0;
    $("withdraw-hint").textContent = page.pending.length === 0
      ? "Nothing is waiting: every reward shown is credited."
      : "Credits every reward still on its way at once, without waiting.";

    const notes = [];
    if (page.unknown.length > 0) {
      notes.push([
        "unknown",
        page.unknown.length + (page.unknown.length === 1 ? " code" : " codes") +
          " kept on this device " + (page.unknown.length === 1 ? "is" : "are") +
          " not known to the service, so not counted.",
      ]);
    }
    if (page.illegal > 0) {
      notes.push([
        "illegal",
        page.illegal + (page.illegal === 1 ? " code" : " codes") +
          " kept on this device " + (page.illegal === 1 ? "is" : "are") +
          " not valid for you (another account's, or damaged), so not counted.",
      ]);
    }
    if (page.expired > 0) {
      notes.push(["expired", page.expired + " expired before " + (page.expired === 1 ? "it was" : "they were") + " credited."]);
    }
    if (page.refused > 0) {
      notes.push(["refused", page.refused + (page.refused === 1 ? " reward" : " rewards") + " cannot be paid as issued (over the limit for " + (page.refused === 1 ? "its" : "their") + " kind), so not counted; support can look into it."]);
    }
    if (page.unreadable > 0) {
      notes.push(["unreadable", page.unreadable + " stored " + (page.unreadable === 1 ? "reward" : "rewards") + " could not be read; support can look into it."]);
    }
    $("notes").replaceChildren(...notes.map(([k, text]) => {
      const li = el("li", { "data-note": k }, text);
      if (k === "illegal") {
        // Codes that do not open for this user never will: the device may forget them.
        // (Unknown ones are kept: the service may not have stored them yet.)
        li.append(" ", el("button", { type: "button", id: "forget", class: "link" }, "Forget these codes"));
      }
      return li;
    }));
    const n = kept().length;
    $("kept").textContent = n === 0 ? "No codes are saved on this device." : n + (n === 1 ? " code is" : " codes are") + " saved on this device.";
    $("wallet").hidden = false;
    $("keep").hidden = false;
  }

  const OUTCOMES = {
    granted: ["granted", "Credited"],
    duplicate: ["duplicate", "Already credited"],
    accepted: ["later", "Accepted; being credited"],
    retry_later: ["later", "Busy; try again shortly"],
    failed_retryable: ["later", "Not credited yet; try again shortly"],
    in_doubt: ["later", "Being confirmed with the wallet"],
    budget_exhausted: ["failed", "The activity's budget is spent"],
    conflict: ["failed", "Does not match the recorded reward"],
    failed_permanent: ["failed", "Could not be credited"],
    invalid: ["failed", "Refused as invalid"],
  };

  function renderResults(items) {
    $("results").replaceChildren(
      ...items.map(({ token, result }) => {
        const [kind, text] = OUTCOMES[result.outcome] || ["failed", result.outcome];
        return el(
          "li",
          { "data-trade": token.trade_no },
          el("span", { class: "what" }, (token.description || token.reward_type) + " · " + fmt.format(token.amount) + " " + token.reward_type),
          el("span", { class: "outcome", "data-outcome": kind, "data-result": result.outcome }, text)
        );
      })
    );
    $("results-box").hidden = items.length === 0;
  }

  // ---- flows ----
  function refused(e) {
    const text = {
      unauthorized: ["Please sign in again", "Open the wallet from the app to see your rewards."],
      session_expired: ["Your session has ended", "For your safety the wallet link works for a short time only. Open the wallet again from the app."],
      session_invalid: ["This link is not valid", "The wallet link was changed or is not from this service. Open the wallet again from the app."],
      session_other_user: ["This link is for another account", "Open the wallet from the app you are signed in to."],
      session_other_activity: ["This link is for another activity", "Open the wallet from the activity in the app."],
    }[e.code];
    return text || null;
  }

  // Shows what went wrong; `doing` names what failed ("load" or "withdraw").
  function fail(e, doing) {
    $("main").setAttribute("aria-busy", "false");
    if (e instanceof Offline && e.message === "offline") {
      status("You are offline. Your rewards are safe; they will show when you are back online.", "offline");
      showProblem("You are offline", "Nothing is lost: every reward you won is kept for you. This page reloads when the connection is back.", true);
      $("problem").dataset.code = "offline";
    } else if (e instanceof Offline) {
      status("The wallet service cannot be reached.", "offline");
      showProblem("The wallet service cannot be reached", "Nothing is lost: every reward you won is kept for you. Try again in a moment.", true);
      $("problem").dataset.code = "unreachable";
    } else if (e instanceof ApiError && refused(e)) {
      const r = refused(e);
      // A refused pass is of no further use; it does not stay in the tab.
      try { sessionStorage.removeItem(SESSION_KEY); } catch (_) { /* private mode */ }
      status(r[0] + ".", "refused");
      showProblem(r[0], r[1], false);
      $("problem").dataset.code = e.code;
      $("wallet").hidden = true;
      $("keep").hidden = true;
    } else if (doing === "withdraw") {
      status("The withdrawal did not finish.", "error");
      showProblem("The withdrawal did not finish", "Rewards listed under Withdrawal as credited are credited; the others are still on their way. Try again in a moment (" + (e.code || e.message) + ").", true);
      $("problem").dataset.code = (e && e.code) || "error";
    } else {
      status("Your rewards could not be loaded.", "error");
      const why = e instanceof ApiError && e.status === 503
        ? "The service is busy. Your rewards are safe; try again in a moment."
        : "Something went wrong on our side (" + (e.code || e.message) + "). Your rewards are safe.";
      showProblem("Could not load your rewards", why, true);
      $("problem").dataset.code = (e && e.code) || "error";
    }
    // Keyboard and screen-reader users land on what went wrong.
    $("problem-title").focus();
  }

  // Loads and shows the wallet; false when it could not (the problem is shown), or
  // when a newer start made this load moot.
  async function refresh(message) {
    const seq = ++state.seq;
    const latest = () => seq === state.seq;
    $("main").setAttribute("aria-busy", "true");
    status(message || "Loading your rewards…");
    try {
      const page = await load();
      if (!latest()) return false;
      $("problem").hidden = true;
      render(page);
      const total = page.pending.length + page.credited.length;
      status(total === 0 ? "No rewards yet." : "Showing " + total + (total === 1 ? " reward." : " rewards."), "ready");
      return true;
    } catch (e) {
      if (latest()) fail(e, "load");
      return false;
    } finally {
      if (latest() && !state.busy) $("main").setAttribute("aria-busy", "false");
    }
  }

  async function start() {
    const gen = ++state.gen;
    state.seq += 1; // any load still running belongs to the previous session
    state.who = null;
    state.page = null;
    state.busy = false;
    $("problem").hidden = true;
    $("problem").dataset.code = "";
    $("wallet").hidden = true;
    $("keep").hidden = true;
    $("results-box").hidden = true;
    $("who").textContent = "";
    $("main").setAttribute("aria-busy", "true");
    status("Loading your rewards…");
    state.session = takeSession();
    if (!state.session) {
      fail(new ApiError(401, "unauthorized", "no session"));
      return;
    }
    let who;
    try {
      who = await api("GET", "/v1/session");
    } catch (e) {
      if (gen === state.gen) fail(e);
      return;
    }
    if (gen !== state.gen) return;
    if (who.caller !== "session") {
      // Something that is not a session (a backend's credential, say) never stays here.
      fail(new ApiError(401, "session_invalid", "not a session"));
      return;
    }
    state.who = who;
    $("who").textContent = "User " + who.user_id + " · " + who.activity_id;
    await refresh();
  }

  async function withdraw() {
    const page = state.page;
    if (!page || state.busy || page.pending.length === 0) return;
    const gen = state.gen;
    const who = state.who;
    state.busy = true;
    $("withdraw").disabled = true;
    $("main").setAttribute("aria-busy", "true");
    status("Withdrawing " + page.pending.length + (page.pending.length === 1 ? " reward…" : " rewards…"));
    const items = [];
    try {
      const tokens = page.pending.filter((t) => t.sealed).map((t) => t.sealed);
      for (const batch of chunks(tokens)) {
        if (gen !== state.gen) return;
        const w = await api("POST", "/v1/withdraw", {
          user_id: who.user_id, activity_id: who.activity_id, tokens: batch,
        });
        for (const it of w.items) if (it.token && it.result) items.push(it);
      }
    } catch (e) {
      if (gen !== state.gen) return;
      state.busy = false;
      // What was credited before the failure stays on screen.
      renderResults(items);
      fail(e, "withdraw");
      return;
    }
    if (gen !== state.gen) return;
    state.busy = false;
    renderResults(items);
    const done = items.filter((i) => ["granted", "duplicate"].includes(i.result.outcome)).length;
    if (await refresh()) {
      status("Withdrawal: " + done + " of " + items.length + " credited.", "ready");
      $("results-title").focus();
    }
  }

  // Removes from this device the kept codes the service says are not this user's.
  async function forget() {
    const gen = state.gen;
    const who = state.who;
    const codes = kept();
    const drop = new Set();
    $("main").setAttribute("aria-busy", "true");
    status("Checking the codes on this device…");
    try {
      for (const batch of chunks(codes)) {
        const v = await api("POST", "/v1/tokens/validate", {
          user_id: who.user_id, activity_id: who.activity_id, tokens: batch,
        });
        v.results.forEach((r, i) => {
          // A code sealed with a key this service does not hold (a key rollout not
          // finished) may be good elsewhere: never forgotten.
          const unknownKey = r.reason && /key id \d+ is unknown/.test(r.reason);
          if (r.validity === "illegal" && !unknownKey) drop.add(batch[i]);
        });
      }
    } catch (e) {
      if (gen === state.gen) fail(e, "load");
      return;
    }
    if (gen !== state.gen) return;
    localStorage.setItem(keptKey(), JSON.stringify(kept().filter((c) => !drop.has(c))));
    if (await refresh()) {
      status("Forgot " + drop.size + (drop.size === 1 ? " code." : " codes."), "ready");
      // The button is gone with its note: focus goes to the form it belongs with.
      $("code").focus();
    }
  }

  function addCode(ev) {
    ev.preventDefault();
    const input = $("code");
    const code = input.value.trim();
    if (!code) {
      status("Paste a reward code first.");
      input.focus();
      return;
    }
    if (!CODE.test(code)) {
      status("That does not look like a reward code; nothing was saved.", "rejected");
      input.focus();
      return;
    }
    try {
      keep(code);
    } catch (_) {
      status("This device cannot save codes (storage is full or blocked).", "error");
      return;
    }
    input.value = "";
    refresh("Checking the code…");
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("retry").addEventListener("click", () => (state.who ? refresh() : start()));
    $("withdraw").addEventListener("click", withdraw);
    $("notes").addEventListener("click", (ev) => {
      if (ev.target && ev.target.id === "forget") forget();
    });
    $("add-form").addEventListener("submit", addCode);
    // A new wallet link opened in this tab changes only the fragment: start over.
    window.addEventListener("hashchange", () => {
      if (/(?:^|[#&])session=/.test(location.hash)) start();
    });
    window.addEventListener("online", () => (state.who ? refresh() : start()));
    window.addEventListener("offline", () => status("You are offline. Your rewards are safe; they will show when you are back online.", "offline"));
    start();
  });
})();

// The globals a script tool sees, built on the engine's natives. Evaluated once per call, before
// the tool's code; gives the engine a handle to run the registered functions.
(native) => {
  "use strict";
  const registered = {};
  let onCancel = null;

  const describe = (error) => {
    if (error instanceof Error) {
      const stack = typeof error.stack === "string" ? error.stack.trimEnd() : "";
      return stack ? `${error.name}: ${error.message}\n${stack}` : `${error.name}: ${error.message}`;
    }
    if (typeof error === "string") return error;
    try {
      return JSON.stringify(error) ?? String(error);
    } catch {
      return String(error);
    }
  };
  const text = (value) => (typeof value === "string" ? value : describe(value));

  const AssistantTool = {};
  const method = (name, fn) => Object.defineProperty(AssistantTool, name, { value: fn, enumerable: true });
  // Each registration returns a test function, as in the AssistantTool API.
  method("registerExecuteTool", (fn) => {
    registered.execute = fn;
    return (params) => fn(params ?? {});
  });
  method("registerApprovalRequest", (fn) => {
    registered.approvalRequest = fn;
    return (params) => fn(params ?? {});
  });
  method("registerExecuteToolWithApproval", (fn) => {
    registered.executeWithApproval = fn;
    return (params, action) => fn(params ?? {}, action ?? { primaryConfirmed: true, secondaryConfirmed: false });
  });
  // Agentry's addition: what the model reads when the user declines (the body never runs then).
  method("registerDeclinedMessage", (fn) => {
    registered.declinedMessage = fn;
  });
  method("report", (message, id) => (id == null ? native.report(text(message)) : native.report(text(message), String(id))));
  Object.defineProperty(AssistantTool, "isCancelled", { get: () => native.isCancelled(), enumerable: true });
  Object.defineProperty(AssistantTool, "onCancel", {
    get: () => onCancel,
    set: (fn) => {
      onCancel = typeof fn === "function" ? fn : null;
      native.onCancelSet(onCancel !== null);
    },
    enumerable: true,
  });
  Object.freeze(AssistantTool);
  Object.defineProperty(globalThis, "AssistantTool", { value: AssistantTool, enumerable: true });

  const timer = (repeat) => (fn, ms, ...args) => {
    const callback = typeof fn === "function" ? () => fn(...args) : () => {};
    const delay = Number(ms);
    return native.setTimer(callback, Number.isFinite(delay) && delay > 0 ? delay : 0, repeat);
  };
  globalThis.setTimeout = timer(false);
  globalThis.setInterval = timer(true);
  globalThis.clearTimeout = globalThis.clearInterval = (id) => {
    if (typeof id === "number") native.clearTimer(id);
  };
  globalThis.queueMicrotask = (fn) => {
    Promise.resolve().then(fn);
  };
  const log = (level) => (...args) => native.log(level, args.map(text).join(" "));
  globalThis.console = Object.freeze({
    log: log("info"), info: log("info"), debug: log("debug"), warn: log("warn"), error: log("error"),
  });

  globalThis.fetch = async (input, init = {}) => {
    if (!native.fetch) {
      throw new TypeError(
        'fetch is not allowed for this tool: its manifest must set "network": true and the user must allow script network access',
      );
    }
    const url = typeof input === "string" ? input : String(input?.url ?? input);
    const headers = [];
    const given = init.headers ?? {};
    const pairs = typeof given.entries === "function" && !Array.isArray(given) ? [...given.entries()] : Array.isArray(given) ? given : Object.entries(given);
    for (const [name, value] of pairs) headers.push([String(name), String(value)]);
    const body = init.body == null ? undefined : typeof init.body === "string" ? init.body : JSON.stringify(init.body);
    const method = String(init.method ?? "GET").toUpperCase();
    const got = await (body === undefined
      ? native.fetch(url, method, JSON.stringify(headers))
      : native.fetch(url, method, JSON.stringify(headers), body));
    const lower = new Map(got.headers.map(([name, value]) => [name.toLowerCase(), value]));
    return Object.freeze({
      ok: got.status >= 200 && got.status < 300,
      status: got.status,
      statusText: got.statusText,
      url: got.url,
      headers: Object.freeze({ get: (name) => lower.get(String(name).toLowerCase()) ?? null, has: (name) => lower.has(String(name).toLowerCase()) }),
      text: async () => got.body,
      json: async () => JSON.parse(got.body),
    });
  };

  return {
    // Runs a registered function; its result (or error) comes back through a promise.
    run(kind, params, extra) {
      return Promise.resolve().then(() => {
        switch (kind) {
          case "execute": {
            if (extra && registered.executeWithApproval) return registered.executeWithApproval(params, extra);
            if (registered.execute) return registered.execute(params);
            if (registered.executeWithApproval) {
              return registered.executeWithApproval(params, { primaryConfirmed: true, secondaryConfirmed: false });
            }
            throw { notRegistered: "execute function (registerExecuteTool or registerExecuteToolWithApproval)" };
          }
          case "approvalRequest": {
            if (!registered.approvalRequest) throw { notRegistered: "approval request (registerApprovalRequest)" };
            return registered.approvalRequest(params);
          }
          case "probe":
            return Object.keys(registered);
          case "declinedMessage": {
            if (!registered.declinedMessage) return undefined;
            return registered.declinedMessage(params, extra);
          }
        }
      });
    },
    registered: () => Object.keys(registered),
    // The cancel message: what onCancel returns, as text, or null for none.
    cancelMessage() {
      const fn = onCancel;
      if (!fn) return null;
      const message = fn();
      return message == null ? null : text(message);
    },
    describe,
    json: (value) => (value === undefined ? undefined : JSON.stringify(value)),
  };
}

//! The provider rules of `edge.yaml`: adapters, base URLs, health probes
//! and extra headers (a part of [`Checker`]).

use super::*;

impl Checker {
    pub(super) fn providers(
        &mut self,
        node_path: &str,
        raw: Vec<RawProvider>,
        provider_ids: &mut HashMap<String, String>,
    ) -> Vec<ProviderSpec> {
        let mut adapters: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (k, p) in raw.into_iter().enumerate() {
            let path = format!("{node_path}.providers[{k}]");
            self.id(&format!("{path}.id"), &p.id);
            let duplicate_id = provider_ids.get(&p.id).cloned();
            if let Some(first) = &duplicate_id {
                let msg = format!("duplicate provider id {:?} (first at {first})", p.id);
                self.fail(format!("{path}.id"), msg);
            } else {
                provider_ids.insert(p.id.clone(), path.clone());
            }
            let adapter = p.adapter.clone().unwrap_or_else(|| p.id.clone());
            let adapter_path = format!("{path}.adapter");
            self.id(&adapter_path, &adapter);
            // An adapter defaulted from a duplicate id is that id's error.
            let reported = duplicate_id.is_some() && p.adapter.is_none();
            if let Some(first) = adapters.get(&adapter).filter(|_| !reported) {
                let msg = format!(
                    "adapter {adapter:?} is already used on this node by {node_path}.providers[{first}]"
                );
                self.fail(adapter_path, msg);
            } else {
                adapters.insert(adapter.clone(), k);
            }
            out.push(self.provider(&path, p, adapter));
        }
        out
    }

    fn provider(&mut self, path: &str, p: RawProvider, adapter: String) -> ProviderSpec {
        self.base_url(&format!("{path}.base_url"), &p.base_url);
        if p.targets.is_empty() {
            self.fail(format!("{path}.targets"), "at least one target is required");
        }
        for (t, target) in p.targets.iter().enumerate() {
            let tpath = format!("{path}.targets[{t}]");
            self.name(&tpath, target, MAX_TARGET_LEN);
            if p.targets[..t].contains(target) {
                self.fail(tpath, format!("duplicate target {target:?}"));
            }
        }
        let max_concurrency = self.range(
            &format!("{path}.max_concurrency"),
            p.max_concurrency,
            DEFAULT_MAX_CONCURRENCY.into(),
            1,
            MAX_MAX_CONCURRENCY,
        );
        let stall_path = format!("{path}.response_stall_timeout_ms");
        let response_stall_timeout_ms = self.range(
            &stall_path,
            Some(p.response_stall_timeout_ms),
            0,
            0,
            MAX_PROVIDER_TIMEOUT_MS,
        );
        let request_timeout_ms = self.range(
            &format!("{path}.request_timeout_ms"),
            Some(p.request_timeout_ms),
            0,
            0,
            MAX_PROVIDER_TIMEOUT_MS,
        );
        let probe = p.health_probe.unwrap_or_default();
        let health_probe = self.health_probe(&format!("{path}.health_probe"), probe, p.kind);
        let headers = self.headers(&format!("{path}.headers"), p.headers);
        let credential = p.credential.and_then(|raw| {
            let env = |name: &str| std::env::var(name).ok();
            let cpath = format!("{path}.credential");
            let managed = !self.leases_disabled;
            let fail = &mut |p, m| self.fail(p, m);
            super::super::credential::validate_credential(&cpath, raw, managed, &env, fail)
        });
        ProviderSpec {
            id: p.id,
            adapter,
            kind: p.kind,
            base_url: p.base_url,
            targets: p.targets,
            max_concurrency: narrow(max_concurrency),
            response_stall_timeout_ms,
            request_timeout_ms,
            health_probe,
            headers,
            credential,
        }
    }

    fn base_url(&mut self, path: &str, value: &str) {
        let url = match url::Url::parse(value) {
            Ok(url) => url,
            Err(e) => return self.fail(path, format!("not an http(s) URL ({e}): {value:?}")),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return self.fail(path, format!("not an http(s) URL: {value:?}"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            // Not echoed: it holds a credential.
            return self.fail(
                path,
                "must not carry credentials (user:pass@); use `headers`",
            );
        }
        if url.host_str().is_none_or(str::is_empty) {
            return self.fail(path, format!("has no host: {value:?}"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            self.fail(
                path,
                format!("must not have a query or fragment: {value:?}"),
            );
        }
    }

    fn health_probe(&mut self, path: &str, raw: RawHealthProbe, kind: ProviderKind) -> HealthProbe {
        let probe_path = raw
            .path
            .unwrap_or_else(|| kind.default_health_path().to_owned());
        let ok = probe_path.starts_with('/')
            && probe_path.len() <= 1024
            && probe_path.bytes().all(|b| b.is_ascii_graphic());
        if !ok {
            let msg = format!("not an absolute path like /health: {probe_path:?}");
            self.fail(format!("{path}.path"), msg);
        }
        let timeout_ms = self.range(
            &format!("{path}.timeout_ms"),
            Some(raw.timeout_ms),
            0,
            0,
            MAX_HEALTH_PROBE_TIMEOUT_MS,
        );
        HealthProbe {
            path: probe_path,
            timeout_ms,
        }
    }

    fn headers(&mut self, path: &str, raw: RawHeaders) -> Vec<(String, String)> {
        let raw = raw.0;
        if raw.len() > MAX_HEADERS {
            self.fail(
                path,
                format!("{} headers, at most {MAX_HEADERS}", raw.len()),
            );
        }
        let mut seen: Vec<String> = Vec::with_capacity(raw.len());
        for (name, value) in &raw {
            let hpath = format!("{path}.{name}");
            let lower = name.to_ascii_lowercase();
            if !framing::http::is_token(name.as_bytes()) {
                self.fail(&hpath, format!("not a valid header name: {name:?}"));
            } else if RESERVED_HEADERS.contains(&lower.as_str()) {
                self.fail(&hpath, "set by the Node itself; cannot be configured");
            } else if seen.contains(&lower) {
                self.fail(&hpath, "duplicate header (names are case-insensitive)");
            }
            // Not echoed: header values often hold API keys.
            if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                self.fail(&hpath, "value contains a control character");
            }
            seen.push(lower);
        }
        raw
    }
}

//! The crate's layers, checked: each module may use only modules of its own layer or of the
//! layers below it, and no two modules may use each other, directly or through others.
//!
//! The layers, lowest first (`../shared/DESIGN.md`, "Architecture"):
//! `model` → `rules` → `store` → `runtime` → `service` → `api` | `cli` → `ui` → the crate root
//! (`lib.rs`, `server.rs`). `api` and `cli` sit side by side and do not use each other.
//!
//! A module is a source file. Every path a file names (`use` declarations and paths in code
//! and in macro bodies, through `crate::`, `super::`, `self::`, a child module or an imported
//! name) is resolved to the file that defines the item, following `pub use` re-exports, so a
//! facade `mod.rs` that re-exports its children adds no dependency of its own. Paths that
//! leave the crate (std, other crates, local variables) are not followed.
//!
//! Besides the layers: `model` and `rules` are pure (no IO crate, no `std::fs`,
//! `std::process`, `std::net`, no wall clock or randomness outside their tests), and services
//! never use each other but through the catalog (and the layer's error).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The layers from the bottom up; a file's layer is its first folder under `src/`.
const LAYERS: &[&[&str]] = &[
    &["model"],
    &["rules"],
    &["store"],
    &["runtime"],
    &["service"],
    &["api", "cli"],
    &["ui"],
];

/// Files at the top: the wiring, above every layer.
const ROOT: &[&str] = &["lib.rs", "server.rs"];

/// A module path inside the crate (`["rules", "plan"]`).
type ModPath = Vec<String>;

#[derive(Debug, Default)]
struct Module {
    /// The file that holds the module.
    file: String,
    /// Items defined here (functions, types, constants, modules...).
    items: BTreeSet<String>,
    /// Names brought in by `use`: name → absolute path.
    aliases: BTreeMap<String, ModPath>,
    /// Modules glob-imported here (`use x::*`), absolute.
    globs: Vec<ModPath>,
}

#[derive(Debug, Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
    /// Paths each file names, each with the module it was named from and whether it was
    /// named in a test.
    references: Vec<(String, ModPath, ModPath, bool)>,
    /// Every path each file names outside its tests, as written (`std::fs::read`,
    /// `tokio::spawn`, `SystemTime::now`), from `use` trees, code and macro bodies.
    named: Vec<(String, Vec<String>)>,
    /// Files that are test modules (declared under `#[cfg(test)]`), by path under `src/`.
    test_files: BTreeSet<String>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("src is readable")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `src/rules/plan/mod.rs` → `rules::plan`.
fn module_of(relative: &str) -> ModPath {
    let mut parts: Vec<String> = relative.split('/').map(str::to_string).collect();
    let last = parts.pop().expect("a file name");
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// Flattens a `use` tree into (name bound, absolute path) pairs; a glob binds `*`.
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut path = prefix.clone();
            if name == "self" {
                let bound = prefix.last().cloned().unwrap_or_default();
                out.push((bound, path));
            } else {
                path.push(name.clone());
                out.push((name, path));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((r.rename.to_string(), path));
        }
        syn::UseTree::Glob(_) => out.push(("*".to_string(), prefix.clone())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(t, prefix, out);
            }
        }
    }
}

/// Collects one file's modules, items, `use` declarations and paths.
struct Collector<'a> {
    krate: &'a mut Crate,
    file: String,
    module: ModPath,
    /// Inside an item only tests compile (`#[cfg(test)]`, `#[test]`).
    in_test: bool,
}

/// Whether `attrs` make an item test-only.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
    })
}

/// The attributes of an item (those syn gives).
#[allow(clippy::wildcard_enum_match_arm, reason = "syn's items, not ebb's")]
fn attributes(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The paths written in a macro's tokens (`a::b::c`, `crate::x`), for macros whose body is
/// not a list of expressions (`html!`, `counter!("x", "k" => v)`).
fn token_paths(tokens: proc_macro2::TokenStream, out: &mut Vec<Vec<String>>) {
    use proc_macro2::TokenTree;
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        match &trees[i] {
            TokenTree::Group(g) => token_paths(g.stream(), out),
            TokenTree::Ident(first) => {
                let mut path = vec![first.to_string()];
                let mut j = i + 1;
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    path.push(next.to_string());
                    j += 3;
                }
                if path.len() > 1 {
                    out.push(path);
                }
                i = j;
                continue;
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => {}
        }
        i += 1;
    }
}

impl Collector<'_> {
    fn module(&mut self) -> &mut Module {
        let file = self.file.clone();
        self.krate
            .modules
            .entry(self.module.clone())
            .or_insert_with(|| Module {
                file,
                ..Module::default()
            })
    }

    fn define(&mut self, ident: &syn::Ident) {
        self.module().items.insert(ident.to_string());
    }

    /// Notes a path as written, unless in a test.
    fn named(&mut self, path: Vec<String>) {
        if !self.in_test {
            self.krate.named.push((self.file.clone(), path));
        }
    }

    /// The file a `mod name;` declared here lives in (`#[path]` or the usual places).
    fn child_file(&self, name: &str, attrs: &[syn::Attribute]) -> Vec<String> {
        let dir = match self.file.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/"),
            None => String::new(),
        };
        for a in attrs {
            if a.path().is_ident("path")
                && let syn::Meta::NameValue(nv) = &a.meta
                && let syn::Expr::Lit(lit) = &nv.value
                && let syn::Lit::Str(s) = &lit.lit
            {
                return vec![format!("{dir}{}", s.value())];
            }
        }
        let stem = self.file.trim_end_matches(".rs");
        let base = if self.file.ends_with("mod.rs") || self.file == "lib.rs" {
            dir
        } else {
            format!("{stem}/")
        };
        vec![format!("{base}{name}.rs"), format!("{base}{name}/mod.rs")]
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let was = self.in_test;
        self.in_test |= test_only(attributes(item));
        self.visit_item_inner(item);
        self.in_test = was;
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 || matches!(segments[0].as_str(), "crate" | "super" | "self") {
            self.krate.references.push((
                self.file.clone(),
                self.module.clone(),
                segments.clone(),
                self.in_test,
            ));
        }
        if segments.len() > 1 {
            self.named(segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)` names who may see an item, not what it uses.
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Paths inside macro calls (`format!`, `matches!`, `assert!`...) are code too.
        if let Ok(exprs) = mac.parse_body_with(
            syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
        ) {
            for expr in &exprs {
                self.visit_expr(expr);
            }
        } else {
            // A body of another shape (`html!`, `counter!("x", "k" => v)`): its paths.
            let mut paths = Vec::new();
            token_paths(mac.tokens.clone(), &mut paths);
            for path in paths {
                if matches!(path[0].as_str(), "crate" | "super" | "self") {
                    self.krate.references.push((
                        self.file.clone(),
                        self.module.clone(),
                        path.clone(),
                        self.in_test,
                    ));
                }
                self.named(path);
            }
        }
        // The macro's own path (`metrics::counter!`).
        let segments: Vec<String> = mac
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        if segments.len() > 1 {
            self.named(segments);
        }
    }
}

impl Collector<'_> {
    #[allow(clippy::wildcard_enum_match_arm, reason = "syn's items, not ebb's")]
    fn visit_item_inner(&mut self, item: &syn::Item) {
        match item {
            syn::Item::Const(i) => self.define(&i.ident),
            syn::Item::Enum(i) => self.define(&i.ident),
            syn::Item::Fn(i) => self.define(&i.sig.ident),
            syn::Item::Static(i) => self.define(&i.ident),
            syn::Item::Struct(i) => self.define(&i.ident),
            syn::Item::Trait(i) => self.define(&i.ident),
            syn::Item::Type(i) => self.define(&i.ident),
            syn::Item::Union(i) => self.define(&i.ident),
            syn::Item::Macro(i) => {
                if let Some(ident) = &i.ident {
                    self.define(ident);
                }
            }
            syn::Item::Use(u) => {
                let public = !matches!(u.vis, syn::Visibility::Inherited);
                let mut found = Vec::new();
                use_paths(&u.tree, &mut Vec::new(), &mut found);
                for (name, path) in found {
                    self.named(path.clone());
                    let Some(absolute) = absolute(&self.module, &path, self.krate) else {
                        continue;
                    };
                    if !public {
                        let named = std::iter::once("crate".to_string())
                            .chain(absolute.iter().cloned())
                            .collect();
                        self.krate.references.push((
                            self.file.clone(),
                            self.module.clone(),
                            named,
                            self.in_test,
                        ));
                    }
                    let module = self.module();
                    if name == "*" {
                        module.globs.push(absolute);
                    } else {
                        module.aliases.insert(name, absolute);
                    }
                }
                return;
            }
            syn::Item::Mod(m) => {
                self.define(&m.ident);
                if m.content.is_none() && self.in_test {
                    let files = self.child_file(&m.ident.to_string(), &m.attrs);
                    self.krate.test_files.extend(files);
                }
                if let Some((_, items)) = &m.content {
                    self.module.push(m.ident.to_string());
                    self.module();
                    for item in items {
                        self.visit_item(item);
                    }
                    self.module.pop();
                }
                return;
            }
            _ => {}
        }
        syn::visit::visit_item(self, item);
    }
}

/// Makes a `use` path absolute when it starts inside the crate; `None` for other crates.
fn absolute(module: &ModPath, path: &[String], krate: &Crate) -> Option<ModPath> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(module.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let mut base = module.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            Some(base)
        }
        _ => {
            // A child module named without `self::` (edition 2018 and later allow it in
            // `use`), or a name this module imported.
            let here = krate.modules.get(module)?;
            if let Some(target) = here.aliases.get(first) {
                return Some(target.iter().chain(&path[1..]).cloned().collect());
            }
            let mut child = module.clone();
            child.push(first.clone());
            krate
                .modules
                .contains_key(&child)
                .then(|| module.iter().chain(path).cloned().collect())
        }
    }
}

/// The file that defines the item an absolute path names, following re-exports.
fn defining_file(krate: &Crate, path: &[String], depth: usize) -> Option<String> {
    if depth > 16 {
        return None;
    }
    // The longest prefix that is a module, then the item named in it.
    let mut split = path.len();
    while split > 0 && !krate.modules.contains_key(&path[..split]) {
        split -= 1;
    }
    let module = krate.modules.get(&path[..split])?;
    let Some(name) = path.get(split) else {
        return Some(module.file.clone());
    };
    if module.items.contains(name) {
        return Some(module.file.clone());
    }
    if let Some(target) = module.aliases.get(name) {
        let mut next = target.clone();
        next.extend(path[split + 1..].iter().cloned());
        if next == path {
            return Some(module.file.clone());
        }
        return defining_file(krate, &next, depth + 1).or_else(|| Some(module.file.clone()));
    }
    for glob in &module.globs {
        let mut next = glob.clone();
        next.extend(path[split..].iter().cloned());
        if let Some(file) = defining_file(krate, &next, depth + 1) {
            return Some(file);
        }
    }
    Some(module.file.clone())
}

fn parse_crate() -> Crate {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    // The library's files by their path under `src/`; `main.rs` and `bin/` are the binaries,
    // which use the library by its crate name.
    let files: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(&root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            (path, relative)
        })
        .filter(|(_, relative)| relative != "main.rs" && !relative.starts_with("bin/"))
        .collect();
    let mut krate = Crate::default();
    // Modules first, so that relative paths can tell a child module from another crate.
    for (_, relative) in &files {
        krate.modules.insert(
            module_of(relative),
            Module {
                file: relative.clone(),
                ..Module::default()
            },
        );
    }
    for (path, relative) in &files {
        let text = std::fs::read_to_string(path).expect("source is readable");
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{relative}: {e}"));
        let mut collector = Collector {
            krate: &mut krate,
            file: relative.clone(),
            module: module_of(relative),
            in_test: false,
        };
        collector.visit_file(&file);
    }
    krate
}

/// Which file uses which: file → files it names (itself left out).
fn dependencies(krate: &Crate) -> BTreeMap<String, BTreeSet<String>> {
    uses(krate, true)
}

/// Which file uses which, counting the uses in tests or not.
fn uses(krate: &Crate, with_tests: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in krate.modules.values() {
        graph.entry(module.file.clone()).or_default();
    }
    for (file, module, path, in_test) in &krate.references {
        if !with_tests && (*in_test || krate.test_files.contains(file)) {
            continue;
        }
        let Some(absolute) = absolute(module, path, krate).filter(|p| !p.is_empty()) else {
            continue;
        };
        if let Some(target) = defining_file(krate, &absolute, 0)
            && &target != file
        {
            graph.entry(file.clone()).or_default().insert(target);
        }
    }
    graph
}

/// The layer of a file: its index in [`LAYERS`], or one past the top for the root files.
fn layer(file: &str) -> Option<usize> {
    if ROOT.contains(&file) {
        return Some(LAYERS.len());
    }
    let folder = file.split('/').next()?;
    LAYERS.iter().position(|names| names.contains(&folder))
}

/// Strongly connected components with more than one file (Tarjan, iterative).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let names: Vec<&String> = graph.keys().collect();
    let index_of: BTreeMap<&String, usize> =
        names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            graph[*n]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let n = names.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut found) = (Vec::new(), 0, Vec::new());
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut work = vec![(start, 0usize)];
        while let Some((v, i)) = work.pop() {
            if i == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = edges[v].get(i) {
                work.push((v, i + 1));
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(names[w].clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    found.push(component);
                }
            }
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
        }
    }
    found
}

#[test]
fn every_file_belongs_to_a_layer() {
    let krate = parse_crate();
    let lost: BTreeSet<&String> = krate
        .modules
        .values()
        .map(|m| &m.file)
        .filter(|f| layer(f).is_none())
        .collect();
    assert!(lost.is_empty(), "files outside every layer: {lost:?}");
}

#[test]
fn modules_use_only_their_layer_and_the_ones_below() {
    let graph = dependencies(&parse_crate());
    let mut upward = Vec::new();
    for (file, targets) in &graph {
        let (Some(from), from_folder) = (layer(file), file.split('/').next()) else {
            continue;
        };
        for target in targets {
            let Some(to) = layer(target) else { continue };
            let sideways = to == from && from_folder != target.split('/').next();
            if to > from || (sideways && from < LAYERS.len()) {
                upward.push(format!("{file} -> {target}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "{} uses of a layer above (or beside):\n{}",
        upward.len(),
        upward.join("\n")
    );
}

/// A cycle as the uses between its files, so the message says which import to break.
fn cycle_edges(graph: &BTreeMap<String, BTreeSet<String>>, cycle: &[String]) -> String {
    let mut uses = Vec::new();
    for from in cycle {
        for to in graph[from].iter().filter(|t| cycle.contains(t)) {
            uses.push(format!("  {from} -> {to}"));
        }
    }
    format!("{}:\n{}", cycle.join(", "), uses.join("\n"))
}

#[test]
fn no_modules_use_each_other() {
    let graph = dependencies(&parse_crate());
    let found: Vec<String> = cycles(&graph)
        .iter()
        .map(|c| cycle_edges(&graph, c))
        .collect();
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

/// What `model` and `rules` may never name outside their tests: IO, the wall clock,
/// randomness, logging and metrics (their callers do those, and pass in `now` and jitter).
fn impure(path: &[String]) -> bool {
    const CRATES: &[&str] = &[
        "tokio",
        "reqwest",
        "redb",
        "etcd_client",
        "actix",
        "actix_web",
        "rustix",
        "russh",
        "tonic",
        "hyper",
        "fastrand",
        "getrandom",
        "tracing",
        "metrics",
    ];
    const STD: &[&str] = &["fs", "process", "net", "env", "thread"];
    let first = path[0].as_str();
    CRATES.contains(&first)
        || (first == "std" && path.get(1).is_some_and(|m| STD.contains(&m.as_str())))
        || path.iter().any(|s| s == "SystemTime" || s == "Instant")
}

#[test]
fn model_and_rules_do_no_io_and_read_no_clock() {
    let krate = parse_crate();
    let found: BTreeSet<String> = krate
        .named
        .iter()
        .filter(|(file, _)| {
            (file.starts_with("model/") || file.starts_with("rules/"))
                && !krate.test_files.contains(file)
        })
        .filter(|(_, path)| impure(path))
        .map(|(file, path)| format!("{file}: {}", path.join("::")))
        .collect();
    assert!(
        found.is_empty(),
        "impure names in model/ or rules/:\n{}",
        found.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn services_use_each_other_only_through_the_catalog() {
    // Outside tests (a test may set up what another service keeps); a service is a file or
    // a folder of files under `service/`.
    let graph = uses(&parse_crate(), false);
    const SHARED: &[&str] = &["service/catalog.rs", "service/error.rs", "service/mod.rs"];
    let service = |f: &str| {
        f.split('/')
            .nth(1)
            .map(|s| s.trim_end_matches(".rs").to_string())
    };
    let mut found = Vec::new();
    for (file, targets) in graph.iter().filter(|(f, _)| f.starts_with("service/")) {
        for target in targets {
            if target.starts_with("service/")
                && !SHARED.contains(&target.as_str())
                && service(target) != service(file)
            {
                found.push(format!("{file} -> {target}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "services using each other:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_a_cycle_and_a_layer() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a.rs", vec!["b.rs"]),
        ("b.rs", vec!["c.rs"]),
        ("c.rs", vec!["a.rs"]),
        ("d.rs", vec!["a.rs"]),
    ]
    .into_iter()
    .map(|(f, t)| (f.to_string(), t.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(cycles(&graph), vec![vec!["a.rs", "b.rs", "c.rs"]]);
    assert_eq!(layer("model/names.rs"), Some(0));
    assert_eq!(layer("cli/runs.rs"), layer("api/runs.rs"));
    assert_eq!(layer("server.rs"), Some(LAYERS.len()));
    assert_eq!(layer("elsewhere.rs"), None);
    // Impure names, however written; pure ones pass.
    let path = |p: &str| p.split("::").map(str::to_string).collect::<Vec<_>>();
    for bad in [
        "std::fs::read",
        "tokio::spawn",
        "SystemTime::now",
        "std::time::Instant",
        "metrics::counter",
    ] {
        assert!(impure(&path(bad)), "{bad}");
    }
    for good in [
        "std::time::Duration",
        "serde_json::json",
        "crate::model::run::RunRecord",
    ] {
        assert!(!impure(&path(good)), "{good}");
    }
    // Paths inside macro bodies of any shape are read.
    let mut paths = Vec::new();
    token_paths(
        "html! { p { (crate::ui::x(a)) } }, \"k\" => std::fs::read(b)"
            .parse()
            .expect("tokens"),
        &mut paths,
    );
    assert_eq!(paths, vec![path("crate::ui::x"), path("std::fs::read")]);
    let krate = parse_crate();
    assert!(
        krate.test_files.contains("rules/plan/answer_tests.rs"),
        "{:?}",
        krate.test_files
    );
    // This crate's own graph is read: some file uses another.
    let real = dependencies(&parse_crate());
    assert!(
        real.values().any(|t| !t.is_empty()),
        "no dependency found at all"
    );
}

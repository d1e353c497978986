//! The module-cycle check: no two sibling modules of a crate may depend on each other.
//!
//! Starting at a crate root (`src/lib.rs`), the check follows `mod` declarations to
//! every file (and inline `mod x { … }` block) and reads each module's references to
//! the crate's own modules: `use` declarations (groups, renames and globs) and paths
//! written in code that start with `crate::`, `super::` or `self::`. A name imported by
//! a module (`pub use queues::Queues;`) is followed to where it comes from, so a
//! reference through a re-export counts against the module that defines the item.
//!
//! Each reference from module `S` to module `T` is attributed to the two children of
//! their lowest common ancestor that contain them: `crate::engine::state::x` using
//! `crate::scheduler::y` makes `engine` depend on `scheduler`. References between a
//! module and its ancestors or descendants (`super::…`, `child::…`) never count.
//! Among the children of every module, any strongly connected set of two or more
//! (a pair that references each other, or a longer ring) is reported with the
//! `file:line` of each reference that closes it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::rust_tokens::{Spanned, Token, tokenize};

/// A module's path below the crate root (`[]` is the root, `["engine", "state"]` is
/// `crate::engine::state`).
type ModPath = Vec<String>;

/// Where a reference was written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    pub file: PathBuf,
    pub line: usize,
}

/// One module: its file, child modules and the names its `use` declarations bring in.
#[derive(Debug, Default)]
struct Module {
    children: BTreeSet<String>,
    /// Imported name → the path as written (relative to this module).
    imports: BTreeMap<String, Vec<String>>,
}

/// A path written in module `from` (as written: `crate::…`, `super::…`, `child::…`).
#[derive(Debug)]
struct RawReference {
    from: ModPath,
    path: Vec<String>,
    site: Site,
}

/// The crate's modules and every reference found, before resolution.
#[derive(Debug, Default)]
struct CrateModules {
    modules: BTreeMap<ModPath, Module>,
    references: Vec<RawReference>,
}

/// A set of sibling modules that depend on each other.
#[derive(Debug)]
pub struct Cycle {
    /// The modules' common parent.
    pub parent: ModPath,
    /// The siblings in the cycle (names of children of `parent`).
    pub members: Vec<String>,
    /// Each dependency between two members, with where it is written.
    pub edges: Vec<(String, String, Vec<Site>)>,
}

/// What the check found in one crate.
#[derive(Debug)]
pub struct Report {
    pub modules: usize,
    pub references: usize,
    pub cycles: Vec<Cycle>,
}

/// Checks the crate whose root file is `root`; `shown_from` shortens the file names reported.
pub fn check(root: &Path, shown_from: &Path) -> Result<Report> {
    let mut krate = CrateModules::default();
    krate.modules.insert(Vec::new(), Module::default());
    let mut pending = vec![(root.to_path_buf(), Vec::new())];
    while let Some((file, path)) = pending.pop() {
        let source = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let shown = file.strip_prefix(shown_from).unwrap_or(&file).to_path_buf();
        for (child_path, declared) in parse_file(&mut krate, &tokenize(&source), &path, &shown) {
            let child_file = locate(&file, &path, &child_path, declared)
                .with_context(|| format!("module {} declared in {}", child_path.join("::"), file.display()))?;
            pending.push((child_file, child_path));
        }
    }
    Ok(krate.report())
}

/// How a `mod x;` names its file: by the usual rules, or by a `#[path = "…"]`.
type Declared = Option<String>;

/// Reads one file of module `path`: records its inline modules, imports and references;
/// returns the out-of-line child modules it declares.
fn parse_file(krate: &mut CrateModules, tokens: &[Spanned], path: &ModPath, file: &Path) -> Vec<(ModPath, Declared)> {
    let ident = |k: usize| match tokens.get(k).map(|t| &t.token) {
        Some(Token::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    let punct = |k: usize, c: char| tokens.get(k).map(|t| &t.token) == Some(&Token::Punct(c));
    let is_sep = |k: usize| tokens.get(k).map(|t| &t.token) == Some(&Token::PathSep);

    let mut declared = Vec::new();
    // Inline modules open here: (module path, brace depth outside it).
    let mut scopes: Vec<(ModPath, usize)> = vec![(path.clone(), usize::MAX)];
    let mut depth = 0usize;
    let mut k = 0;
    while k < tokens.len() {
        let current = scopes.last().map(|s| s.0.clone()).unwrap_or_default();
        let site = Site { file: file.to_path_buf(), line: tokens[k].line };
        match &tokens[k].token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if scopes.last().is_some_and(|s| s.1 == depth) {
                    scopes.pop();
                }
            }
            Token::Ident(word)
                if word == "mod" && ident(k + 1).is_some() && (punct(k + 2, '{') || punct(k + 2, ';')) =>
            {
                let name = ident(k + 1).unwrap_or_default().to_string();
                let child: ModPath = current.iter().cloned().chain([name.clone()]).collect();
                krate.modules.entry(current.clone()).or_default().children.insert(name);
                krate.modules.entry(child.clone()).or_default();
                if punct(k + 2, '{') {
                    scopes.push((child, depth));
                    depth += 1;
                } else {
                    declared.push((child, path_attribute(tokens, k)));
                }
                k += 3;
                continue;
            }
            Token::Ident(word) if word == "use" && !is_sep(k.wrapping_sub(1)) => {
                let mut pos = k + 1;
                let mut items = Vec::new();
                use_tree(tokens, &mut pos, Vec::new(), &mut items);
                let module = krate.modules.entry(current.clone()).or_default();
                for item in items {
                    if let Some(name) = item.name() {
                        module.imports.insert(name, item.path.clone());
                    }
                    krate.references.push(RawReference { from: current.clone(), path: item.path, site: site.clone() });
                }
                while pos < tokens.len() && !punct(pos, ';') {
                    pos += 1;
                }
                k = pos + 1;
                continue;
            }
            Token::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && is_sep(k + 1)
                    && !is_sep(k.wrapping_sub(1)) =>
            {
                let mut segments = vec![word.clone()];
                let mut pos = k + 1;
                while is_sep(pos)
                    && let Some(next) = ident(pos + 1)
                {
                    segments.push(next.to_string());
                    pos += 2;
                }
                krate.references.push(RawReference { from: current, path: segments, site });
                k = pos;
                continue;
            }
            _ => {}
        }
        k += 1;
    }
    declared
}

/// The `"…"` of a `#[path = "…"]` among the attributes just before the `mod` at `k`.
fn path_attribute(tokens: &[Spanned], k: usize) -> Declared {
    let start = k.saturating_sub(12);
    (start..k).find_map(|j| match (&tokens[j].token, tokens.get(j + 1).map(|t| &t.token), tokens.get(j + 2)) {
        (Token::Ident(p), Some(Token::Punct('=')), Some(Spanned { token: Token::Str(s), .. })) if p == "path" => {
            Some(s.clone())
        }
        _ => None,
    })
}

/// One leaf of a `use` tree.
#[derive(Debug, PartialEq)]
struct UseItem {
    path: Vec<String>,
    alias: Option<String>,
    glob: bool,
}

impl UseItem {
    /// The name it brings into scope (`None` for a glob and for `as _`).
    fn name(&self) -> Option<String> {
        if self.glob {
            return None;
        }
        match &self.alias {
            Some(a) if a == "_" => None,
            Some(a) => Some(a.clone()),
            None => self.path.last().cloned(),
        }
    }
}

/// Parses a use tree at `pos` (after `use`, or inside a `{…}` group) below `prefix`.
fn use_tree(tokens: &[Spanned], pos: &mut usize, prefix: Vec<String>, out: &mut Vec<UseItem>) {
    let token = |p: usize| tokens.get(p).map(|t| &t.token);
    let mut path = prefix;
    if token(*pos) == Some(&Token::PathSep) {
        path.push("::".into());
        *pos += 1;
    }
    loop {
        match token(*pos) {
            Some(Token::Ident(s)) => {
                if s != "self" || path.is_empty() {
                    path.push(s.clone());
                }
                *pos += 1;
                if token(*pos) == Some(&Token::PathSep) {
                    *pos += 1;
                    continue;
                }
                break;
            }
            Some(Token::Punct('*')) => {
                *pos += 1;
                out.push(UseItem { path, alias: None, glob: true });
                return;
            }
            Some(Token::Punct('{')) => {
                *pos += 1;
                while let Some(t) = token(*pos) {
                    match t {
                        Token::Punct('}') => {
                            *pos += 1;
                            return;
                        }
                        Token::Punct(',') => *pos += 1,
                        _ => {
                            let before = *pos;
                            use_tree(tokens, pos, path.clone(), out);
                            if *pos == before {
                                *pos += 1;
                            }
                        }
                    }
                }
                return;
            }
            _ => return,
        }
    }
    let mut alias = None;
    if let (Some(Token::Ident(kw)), Some(Token::Ident(name))) = (token(*pos), token(*pos + 1))
        && kw == "as"
    {
        alias = Some(name.clone());
        *pos += 2;
    }
    out.push(UseItem { path, alias, glob: false });
}

/// The file of module `child`, declared in `parent_file` (module `parent`).
fn locate(parent_file: &Path, parent: &ModPath, child: &ModPath, declared: Declared) -> Result<PathBuf> {
    let here = parent_file.parent().unwrap_or(Path::new("."));
    if let Some(explicit) = declared {
        return Ok(here.join(explicit));
    }
    let owns_dir = matches!(parent_file.file_name().and_then(|n| n.to_str()), Some("lib.rs" | "main.rs" | "mod.rs"));
    let mut dir = if owns_dir { here.to_path_buf() } else { here.join(parent_file.file_stem().unwrap_or_default()) };
    // Inline modules between the file's module and the child add folders.
    for inline in &child[parent.len()..child.len() - 1] {
        dir.push(inline);
    }
    let name = child.last().map(String::as_str).unwrap_or_default();
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    [flat.clone(), nested].into_iter().find(|p| p.is_file()).context(format!("no file {}", flat.display()))
}

impl CrateModules {
    /// `path`, written in module `from`, as a path from the crate root; `None` when it
    /// leaves the crate (another crate, `std`) or names a local item of `from`.
    fn absolute(&self, from: &ModPath, path: &[String], hops: usize) -> Option<Vec<String>> {
        let (first, rest) = path.split_first()?;
        let mut base: ModPath = match first.as_str() {
            "crate" => return Some(rest.to_vec()),
            "self" => from.clone(),
            "super" => from[..from.len().checked_sub(1)?].to_vec(),
            _ => {
                let module = self.modules.get(from)?;
                if module.children.contains(first) {
                    return Some(from.iter().chain(path).cloned().collect());
                }
                let imported = module.imports.get(first).filter(|p| p.first() != Some(first) && hops < 8)?;
                let mut target = self.absolute(from, imported, hops + 1)?;
                target.extend(rest.iter().cloned());
                return Some(target);
            }
        };
        let mut rest = rest;
        while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
            base.pop()?;
            rest = tail;
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The deepest module that the crate-root path `path` names or reaches through imports.
    fn target(&self, path: &[String], hops: usize) -> ModPath {
        let mut module = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let Some(here) = self.modules.get(&module) else { break };
            if here.children.contains(segment) {
                module.push(segment.clone());
                continue;
            }
            if hops < 8
                && let Some(imported) = here.imports.get(segment)
                && let Some(mut through) = self.absolute(&module, imported, hops + 1)
            {
                through.extend(path[i + 1..].iter().cloned());
                return self.target(&through, hops + 1);
            }
            break;
        }
        module
    }

    /// Resolves every reference and finds the cycles among siblings.
    fn report(&self) -> Report {
        // parent → (from child, to child) → sites
        let mut graphs: BTreeMap<ModPath, BTreeMap<(String, String), Vec<Site>>> = BTreeMap::new();
        for reference in &self.references {
            let Some(absolute) = self.absolute(&reference.from, &reference.path, 0) else { continue };
            let to = self.target(&absolute, 0);
            let from = &reference.from;
            let shared = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if shared == from.len() || shared == to.len() {
                continue; // a module and its ancestor or descendant
            }
            let edge = (from[shared].clone(), to[shared].clone());
            let sites = graphs.entry(from[..shared].to_vec()).or_default().entry(edge).or_default();
            if !sites.contains(&reference.site) {
                sites.push(reference.site.clone());
            }
        }
        let mut cycles = Vec::new();
        for (parent, edges) in &graphs {
            for members in strongly_connected(edges.keys()) {
                let inside = |e: &&(String, String)| members.contains(&e.0) && members.contains(&e.1);
                let edges = edges
                    .iter()
                    .filter(|(e, _)| inside(e))
                    .map(|((a, b), sites)| (a.clone(), b.clone(), sites.clone()))
                    .collect();
                cycles.push(Cycle { parent: parent.clone(), members: members.into_iter().collect(), edges });
            }
        }
        Report { modules: self.modules.len(), references: self.references.len(), cycles }
    }
}

/// The strongly connected sets of two or more nodes of the graph given by its edges.
fn strongly_connected<'a>(edges: impl Iterator<Item = &'a (String, String)>) -> Vec<BTreeSet<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().insert(b);
        next.entry(b).or_default();
    }
    let reach = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(n) = stack.pop() {
            for &m in &next[n] {
                if seen.insert(m) {
                    stack.push(m);
                }
            }
        }
        seen
    };
    // The graphs are tiny (the children of one module): reachability sets suffice.
    let reachable: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut sets = Vec::new();
    for &n in next.keys() {
        if done.contains(n) {
            continue;
        }
        let set: BTreeSet<String> = std::iter::once(n)
            .chain(reachable[n].iter().copied().filter(|m| *m != n && reachable[m].contains(n)))
            .map(str::to_string)
            .collect();
        done.extend(set.iter().cloned());
        if set.len() > 1 {
            sets.push(set);
        }
    }
    sets
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parent = std::iter::once("crate").chain(self.parent.iter().map(String::as_str)).collect::<Vec<_>>();
        let parent = parent.join("::");
        writeln!(f, "module cycle among the children of {parent}: {}", self.members.join(" <-> "))?;
        for (from, to, sites) in &self.edges {
            let shown: Vec<String> = sites.iter().take(4).map(|s| format!("{}:{}", s.file.display(), s.line)).collect();
            let more = if sites.len() > 4 { format!(" (+{} more)", sites.len() - 4) } else { String::new() };
            writeln!(f, "  {from} -> {to}: {}{more}", shown.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#!/usr/bin/env python3
"""Structure checks of the engine's sources (issue 26 item 6), run by tests/t_02_structure.sh.

Prints one "PASS <name>" or "FAIL <name>: <measured numbers>" line per check; exits 0.

What "file A depends on file B" means here. The trainers are unity builds: zero.cuh includes every
part of the engine in one order, so a part may use any name defined in a part included before it
without an #include of its own. So a dependency is a use, not an include:
  A depends on B  when A's code (outside comments and string literals, #define bodies and #if
                  conditions included) names an identifier that B defines at file scope, or when
                  A #includes B. Member accesses (after "." or "->") are not uses.
  B defines       at file scope: a function with a body, a struct/union/enum tag, an enum constant,
                  a typedef name, a variable (not "extern"), a #define'd macro.
  a declaration   at file scope: a function prototype without a body, "extern" variable, or a
                  bare "struct X;" whose body or definition is in another file.
A name defined in several files (the CPU and GPU engines define the same functions under
#if ZERO_GPU_BUILD) gives an edge to each of them, except where the name is declared in an
interface file, zero/hooks.h (the hooks the core calls for each extension) or zero/backend.h
(the functions both engines implement): then the edge goes to the interface file only. Code is
read as written: every #if branch counts (so the check holds for the CPU and the GPU build alike).

Checks:
  structure_no_cycles            the graph of "depends on" edges among all project headers
                                 (zero.cuh, zero/, plan/, train/, model/, common/, cpu/, kernels/) has no
                                 circle (strongly connected component of more than one file).
  structure_unity_order          each part included by zero.cuh needs only the parts above it:
                                 every name it uses is defined in itself, in a file that comes
                                 before it in the unity order, in zero.cuh before its first part,
                                 or declared in zero/hooks.h or zero/backend.h.
  structure_no_forward_declarations  no file except zero/hooks.h and zero/backend.h declares a
                                 function, variable or struct whose definition is in another file.
  structure_lower_layers_name_nothing_of_zero  common/, cpu/, kernels/ neither include zero.cuh or
                                 zero/ nor name any identifier defined there, nor any zero_*
                                 function or Zero* type.
  structure_core_file_sizes      zero.cuh + the core files at the top of zero/ (zero/*.h, not the
                                 extension folders): <= 2200 lines in all, none over 450.
  structure_engine_fields        struct ZeroEngine (zero/engine.h) declares <= 30 fields of its own
                                 (each declarator counts; the fields of an anonymous struct nested
                                 in it count one by one; a named extension struct counts as one).
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
INTERFACES = {'zero/hooks.h', 'zero/backend.h'}
CORE_TOTAL_MAX, CORE_FILE_MAX, ENGINE_FIELDS_MAX = 2200, 450, 30
SCAN_DIRS = ['zero', 'plan', 'train', 'model', 'common', 'cpu', 'kernels']
LOWER = ('common/', 'cpu/', 'kernels/')
KEYWORDS = set('''auto break case char const continue default do double else enum extern float for goto
if inline int long register restrict return short signed sizeof static struct switch typedef union
unsigned void volatile while bool true false NULL defined template typename class public private
namespace using operator new delete this nullptr constexpr static_assert alignas alignof decltype
__global__ __device__ __host__ __forceinline__ __restrict__ __shared__ __launch_bounds__
__attribute__ __align__ __inline__ __restrict __extension__ __typeof__ typeof _Atomic'''.split())
ATTRIBUTES = {'__attribute__', '__launch_bounds__', '__align__', 'alignas', '__declspec'}
IDENT = re.compile(r'[A-Za-z_]\w*')


def strip_comments_and_strings(text):
    """Blank out comments, string and char literals, keeping newlines (line numbers stay)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n) - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)


class Source:
    def __init__(self, rel):
        self.rel = rel
        with open(os.path.join(ROOT, rel), encoding='utf-8', errors='replace') as f:
            self.raw = f.read()
        self.lines = self.raw.count('\n')
        self.defs = {}       # name -> line
        self.decls = {}      # name -> line (prototypes, extern, forward struct)
        self.uses = set()
        self.calls = set()   # identifiers followed by "("
        self.includes = []   # (line, path as written)
        self.include_depth = {}  # line -> #if nesting depth there
        depth = 0
        for lineno, line in enumerate(self.raw.split('\n'), 1):  # include paths are literals: read raw
            if re.match(r'\s*#\s*if', line):
                depth += 1
            elif re.match(r'\s*#\s*endif', line):
                depth -= 1
            m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
            if m:
                self.includes.append((lineno, m.group(1)))
                self.include_depth[lineno] = depth
        self.parse(strip_comments_and_strings(self.raw))

    def parse(self, text):
        # Preprocessor lines (with continuations) apart from the code.
        code_lines, lines, i = [], text.split('\n'), 0
        while i < len(lines):
            line, start = lines[i], i
            if line.lstrip().startswith('#'):
                while line.endswith('\\') and i + 1 < len(lines):
                    i += 1; line = line[:-1] + ' ' + lines[i]
                self.preprocessor(line.strip(), start + 1)
                code_lines.extend([''] * (i - start + 1))
            else:
                code_lines.append(line)
            i += 1
        self.code('\n'.join(code_lines))

    def preprocessor(self, line, lineno):
        if re.match(r'#\s*include', line):
            return
        m = re.match(r'#\s*define\s+([A-Za-z_]\w*)(\([^)]*\))?(.*)', line)
        if m:
            self.defs.setdefault(m.group(1), lineno)
            params = set(IDENT.findall(m.group(2) or ''))
            self.uses.update(t for t in IDENT.findall(m.group(3)) if t not in params)
            return
        m = re.match(r'#\s*(if|elif|ifdef|ifndef)\b(.*)', line)
        if m:
            self.uses.update(IDENT.findall(m.group(2)))

    def code(self, text):
        tokens = []  # (token, line)
        for lineno, line in enumerate(text.split('\n'), 1):
            for m in re.finditer(r'[A-Za-z_]\w*|->|::|\S', line):
                tokens.append((m.group(0), lineno))
        # Uses: every identifier not after "." or "->".
        for k, (t, _) in enumerate(tokens):
            if IDENT.fullmatch(t) and t not in KEYWORDS and not (k and tokens[k - 1][0] in ('.', '->')):
                self.uses.add(t)
                if k + 1 < len(tokens) and tokens[k + 1][0] == '(':
                    self.calls.add(t)
        # File-scope statements.
        depth, stmt, k = 0, [], 0
        while k < len(tokens):
            t, line = tokens[k]
            if depth == 0:
                if t == '{':
                    words = [w for w, _ in stmt]
                    if words[-1:] == ['extern'] or words[-2:] == ['extern', '"'] or 'namespace' in words:
                        stmt = []; k += 1; continue  # extern "C" { ... }: its inside is file scope
                    end = self.match(tokens, k)
                    body = tokens[k + 1:end]
                    self.block(stmt, body, line)
                    if self.is_function(stmt):
                        stmt = []; k = end + 1; continue
                    stmt = stmt + [('{...}', line)]
                    k = end + 1; continue
                if t == '}':
                    k += 1; stmt = []; continue  # end of extern "C"
                if t == ';':
                    self.statement(stmt)
                    stmt = []; k += 1; continue
                stmt.append((t, line))
            k += 1

    @staticmethod
    def match(tokens, k):
        depth = 0
        for j in range(k, len(tokens)):
            if tokens[j][0] == '{':
                depth += 1
            elif tokens[j][0] == '}':
                depth -= 1
                if depth == 0:
                    return j
        return len(tokens) - 1

    @staticmethod
    def function_name(stmt):
        """The name before the first top-level parenthesised group, attributes skipped."""
        k = 0
        while k < len(stmt):
            t = stmt[k][0]
            if t in ATTRIBUTES and k + 1 < len(stmt) and stmt[k + 1][0] == '(':
                depth, k = 0, k + 1
                while k < len(stmt):
                    depth += {'(': 1, ')': -1}.get(stmt[k][0], 0)
                    if depth == 0:
                        break
                    k += 1
            elif t == '(':
                prev = stmt[k - 1][0] if k else ''
                if IDENT.fullmatch(prev) and prev not in KEYWORDS:
                    return stmt[k - 1]
                return None
            k += 1
        return None

    def is_function(self, stmt):
        words = [w for w, _ in stmt]
        if '=' in words or not words or words[0] in ('struct', 'union', 'enum', 'typedef'):
            return False
        return '(' in words and self.function_name(stmt) is not None

    def block(self, stmt, body, line):
        words = [w for w, _ in stmt]
        if self.is_function(stmt):
            name, l = self.function_name(stmt)
            self.defs.setdefault(name, l)
            return
        for kw in ('struct', 'union', 'enum'):
            if kw in words:
                j = words.index(kw)
                if j + 1 < len(words) and IDENT.fullmatch(words[j + 1]):
                    self.defs.setdefault(words[j + 1], line)
                if kw == 'enum':
                    prev = '{'
                    for t, l in body:
                        if prev in ('{', ',') and IDENT.fullmatch(t):
                            self.defs.setdefault(t, l)
                        prev = t
                        if t == '(':
                            prev = None

    def statement(self, stmt):
        if not stmt:
            return
        words = [w for w, _ in stmt]
        if words[0] == 'typedef':
            m = None
            for k in range(len(words) - 2):
                if words[k] == '(' and words[k + 1] == '*' and IDENT.fullmatch(words[k + 2]):
                    m = stmt[k + 2]
            if m is None:
                idents = [s for s in stmt if IDENT.fullmatch(s[0]) and s[0] not in KEYWORDS]
                m = idents[-1] if idents else None
            if m:
                self.defs.setdefault(*m)
            return
        if words[0] in ('struct', 'union', 'enum') and len(words) == 2:
            self.decls.setdefault(*stmt[1]); return
        if 'template' in words[:1]:
            return
        top = words[:words.index('=')] if '=' in words else words
        if '(' in top and '{...}' not in top:
            f = self.function_name(stmt)
            if f and not (words[0] == 'static_assert' or f[0] == 'static_assert'):
                self.decls.setdefault(*f)
            return
        # A variable: the identifier before "=", "[" or the end (first declarator).
        cut = len(words)
        for k, w in enumerate(words):
            if w in ('=', '['):
                cut = k; break
        idents = [s for s in stmt[:cut] if IDENT.fullmatch(s[0]) and s[0] not in KEYWORDS]
        if len(idents) >= 1 and len([w for w in words[:cut] if w != '*']) >= 2:
            (self.decls if words[0] == 'extern' else self.defs).setdefault(*idents[-1])


def collect():
    files = {}
    for top in ['zero.cuh']:
        files[top] = Source(top)
    for d in SCAN_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, d)):
            for n in sorted(names):
                if n.endswith(('.h', '.cuh')):
                    rel = os.path.relpath(os.path.join(dirpath, n), ROOT)
                    files[rel] = Source(rel)
    return files


def resolve(files, rel, inc):
    for cand in (inc, os.path.normpath(os.path.join(os.path.dirname(rel), inc))):
        if cand in files:
            return cand
    return None


def unity_order(files, root='zero.cuh'):
    """Files in the order their text ends up in the translation unit (first inclusion wins)."""
    order, seen = [], set()

    def visit(rel):
        seen.add(rel)
        for _, inc in files[rel].includes:
            r = resolve(files, rel, inc)
            if r and r not in seen:
                visit(r)
        order.append(rel)
    seen.add(root)
    for _, inc in files[root].includes:
        r = resolve(files, root, inc)
        if r and r not in seen:
            visit(r)
    return order


# Issue 26's targets are 0 circles, 0 late uses, 0 cross-file forward declarations and a core of at
# most CORE_TOTAL_MAX lines; the tree is not there yet. Until it is, a check above its target but
# not above the count measured when this ratchet was set (2026-12-06) prints "GAP" (the numbers,
# not a pass) and a count above it fails: the structure may only get better. Lower these as the
# hooks land; delete an entry when its check passes.
RATCHET = {}  # every structure target of issue 26 is met (2026-12-06)


def verdict(name, measured):
    """FAIL, or GAP while measured is within the ratchet (see RATCHET)."""
    return 'GAP' if measured <= RATCHET.get(name, -1) else 'FAIL'


def main():
    files = collect()
    definers, interface_names = {}, {}  # interface_names: name -> the interface files declaring it
    for rel, s in files.items():
        for name in s.defs:
            definers.setdefault(name, set()).add(rel)
        if rel in INTERFACES:
            for name in list(s.decls) + list(s.defs):
                interface_names.setdefault(name, set()).add(rel)

    order = unity_order(files)
    pos = {rel: k for k, rel in enumerate(order)}

    def targets(rel, name):
        if name in files[rel].defs:
            return set()
        if name in interface_names:  # declared in hooks.h or backend.h: the edge goes to the file declaring it
            return interface_names[name] - {rel}
        owners = definers.get(name, set()) - {rel}
        if rel in pos:  # in the unity build the compiler sees the definitions above the use
            above = {o for o in owners if o in pos and pos[o] < pos[rel]}
            if above:
                return above
        return owners

    edges = {rel: {} for rel in files}  # rel -> {target: example name}
    for rel, s in files.items():
        for name in s.uses:
            for t in targets(rel, name):
                edges[rel].setdefault(t, name)
        if rel != 'zero.cuh':  # zero.cuh's includes are the unity order, not dependencies
            for _, inc in s.includes:
                r = resolve(files, rel, inc)
                if r and r != rel:
                    edges[rel].setdefault(r, '#include')

    # (a) circles: Tarjan's strongly connected components.
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(files):
        if v not in index:
            strong(v)
    if sccs:
        desc = []
        for comp in sccs:
            inside = ['%s->%s (%s)' % (a, b, edges[a][b]) for a in comp for b in sorted(edges[a]) if b in comp]
            desc.append('{%s}: %s' % (' '.join(comp), ', '.join(inside[:12]) + (' ...' if len(inside) > 12 else '')))
        print('%s structure_no_cycles: %d circle(s): %s' % (verdict('structure_no_cycles', len(sccs)), len(sccs), ' | '.join(desc)))
    else:
        print('PASS structure_no_cycles')

    # (a) unity order: each part needs only the parts above it.
    root = files['zero.cuh']
    parts = [(l, root.include_depth[l]) for l, inc in root.includes if inc.startswith(('zero/', 'plan/'))]
    outer = min([d for _, d in parts] or [0])  # below the include guard, outside any #if
    first_part = min([l for l, d in parts if d == outer] or [root.lines])
    late = []
    for rel in order:
        for t, name in sorted(edges[rel].items()):
            if t in INTERFACES:
                continue
            if t == 'zero.cuh':
                line = root.defs.get(name, 0)
                if line > first_part:
                    late.append('%s uses %s (zero.cuh:%d)' % (rel, name, line))
            elif t in pos and pos[t] > pos[rel]:
                late.append('%s uses %s (%s)' % (rel, name, t))
    if late:
        print('%s structure_unity_order: %d part(s) need a part below them: %s' % (verdict('structure_unity_order', len(late)), len(late), '; '.join(late)))
    else:
        print('PASS structure_unity_order')

    # (a) forward declarations across files.
    fwd = []
    for rel, s in sorted(files.items()):
        if rel in INTERFACES:
            continue
        for name, line in sorted(s.decls.items(), key=lambda x: x[1]):
            if name not in s.defs and definers.get(name):
                fwd.append('%s:%d %s (defined in %s)' % (rel, line, name, ','.join(sorted(definers[name]))))
    if fwd:
        print('%s structure_no_forward_declarations: %d: %s' % (verdict('structure_no_forward_declarations', len(fwd)), len(fwd), '; '.join(fwd)))
    else:
        print('PASS structure_no_forward_declarations')

    # (b) common/, cpu/, kernels/ name nothing of zero/.
    zero_files = {rel for rel in files if rel == 'zero.cuh' or rel.startswith('zero/')}
    bad = []
    for rel, s in sorted(files.items()):
        if not rel.startswith(LOWER):
            continue
        for line, inc in s.includes:
            if inc == 'zero.cuh' or inc.startswith('zero/') or '../zero' in inc:
                bad.append('%s:%d includes %s' % (rel, line, inc))
        for name in sorted(s.uses):
            owners = definers.get(name, set())
            if name in s.defs:
                continue
            if owners & zero_files and not owners - zero_files:
                bad.append('%s names %s (%s)' % (rel, name, ','.join(sorted(owners))))
            elif (name in s.calls and name.startswith('zero_')) or re.match(r'Zero[A-Z]', name):
                bad.append('%s names %s' % (rel, name))
    if bad:
        print('FAIL structure_lower_layers_name_nothing_of_zero: %d: %s' % (len(bad), '; '.join(bad)))
    else:
        print('PASS structure_lower_layers_name_nothing_of_zero')

    # (c) core sizes.
    core = ['zero.cuh'] + sorted(r for r in files if r.startswith('zero/') and r.count('/') == 1)
    sizes = {r: files[r].lines for r in core}
    total, over = sum(sizes.values()), {r: n for r, n in sizes.items() if n > CORE_FILE_MAX}
    detail = ' '.join('%s=%d' % (r, n) for r, n in sizes.items())
    if total <= CORE_TOTAL_MAX and not over:
        print('PASS structure_core_file_sizes (%d lines in %d files, largest %d)' % (total, len(core), max(sizes.values())))
    else:
        print('%s structure_core_file_sizes: %d lines (max %d), files over %d: %s; %s' % (
            verdict('structure_core_file_sizes', total) if not over else 'FAIL', total, CORE_TOTAL_MAX, CORE_FILE_MAX, ' '.join('%s=%d' % x for x in over.items()) or 'none', detail))

    # (d) ZeroEngine's own fields.
    n, names = engine_fields(os.path.join(ROOT, 'zero/engine.h'))
    if n is None:
        print('FAIL structure_engine_fields: struct ZeroEngine not found in zero/engine.h')
    elif n <= ENGINE_FIELDS_MAX:
        print('PASS structure_engine_fields (%d fields, max %d)' % (n, ENGINE_FIELDS_MAX))
    else:
        print('FAIL structure_engine_fields: %d fields (max %d): %s' % (n, ENGINE_FIELDS_MAX, ' '.join(names)))


def engine_fields(path):
    text = strip_comments_and_strings(open(path, encoding='utf-8').read())
    text = '\n'.join(l for l in text.split('\n') if not l.lstrip().startswith('#'))
    m = re.search(r'typedef\s+struct\s+(ZeroEngine\s*)?\{', text) if 'ZeroEngine;' in text else None
    start = None
    for mm in re.finditer(r'struct\s+(\w+\s*)?\{', text):
        end = Source.match([(c, 0) for c in text[mm.end() - 1:]], 0) + mm.end() - 1
        tail = text[end + 1:end + 40]
        if (mm.group(1) or '').strip() == 'ZeroEngine' or re.match(r'\s*ZeroEngine\s*;', tail):
            start = mm.end(); break
    if start is None:
        return None, []
    depth, stmt, names, k, skip = 1, '', [], start, False
    while depth > 0 and k < len(text):
        c = text[k]
        if c == '{':
            depth += 1
            stmt = ''  # anonymous nested struct: its fields count one by one
        elif c == '}':
            depth -= 1
            stmt, skip = '', depth == 1
        elif c == ';' and skip:
            stmt, skip = '', False  # "} gpu;": the anonymous struct's name, its fields counted above
        elif c == ';':
            decl = re.sub(r'\[[^\]]*\]', '', stmt)
            decl = re.sub(r'\([^)]*\)', '', decl)
            for part in decl.split(','):
                ids = [t for t in IDENT.findall(part.split('=')[0]) if t not in KEYWORDS]
                if ids:
                    names.append(ids[-1])
            stmt = ''
        else:
            stmt += c
        k += 1
    return len(names), names


if __name__ == '__main__':
    main()

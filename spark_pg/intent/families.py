"""Intent-family classification (:func:`classify_family`): weighted keyword evidence per family over the
normalised text, a prior from the tool itself, and a strong bonus for the program of a shell command; the
most specific family wins ties. A file or folder a harmless command names (``mkdir -p deploy/k8s``) is no
evidence of a deployment (:func:`file_names`). The keyword scores are reused by memory-domain
classification.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from types import MappingProxyType

from spark_pg.intent.limits import SCAN_LIMIT
from spark_pg.intent.shell import _OPERAND_PROGRAMS, _command_family, _main_segment, _segments
from spark_pg.intent.text import _CAMEL, _clip, _squash
from spark_pg.intent.tools import _SOCIAL_NAMES, _mcp_parts, _tool_kind, _tool_tokens

# Keyword evidence per family: (alternation, weight). Matched as whole words against the normalised text
# (lower case, separators turned into spaces, so "auth/login.py" reads "auth login py").
_FAMILY_WORDS: Mapping[str, tuple[tuple[str, float], ...]] = MappingProxyType(
    {
        "auth_security": (
            (
                r"auth|authn|authz|authentication|authenticate|authorization|authorize|login|logins|logout|"
                r"log in|sign ?in|sign ?up|signup|passwords?|passwd|jwts?|oauth2?|oidc|saml|sso|csrf|xss|"
                r"secrets?|credentials?|api ?keys?|apikey|access tokens?|refresh tokens?|bearer|rbac|"
                r"encrypt|encryption|decrypt|bcrypt|argon2|scrypt|vulnerabilit(?:y|ies)|cve|security|"
                r"injection|2fa|mfa|totp|keycloak|auth0|cognito|session cookies?|htpasswd|user input|"
                r"untrusted input|user supplied",
                2.0,
            ),
            (
                r"tokens?|sessions?|cors|tls|ssl|certificates?|certs?|roles?|permissions?|sanitize|"
                r"sanitise|middleware|hashing|private key|ssh keys?|vault|firewall|acl",
                1.0,
            ),
        ),
        "deployment_ops": (
            (
                r"deploy|deploys|deployed|deploying|deployments?|rollout|rollback|roll back|kubernetes|"
                r"k8s|kubectl|helm|terraform|ansible|heroku|vercel|netlify|flyctl|fly io|cloudformation|"
                r"pulumi|canary|blue green|production|prod|staging|releases?|releasing|downtime|"
                r"load balancer|systemd|systemctl|nginx|infra|infrastructure|ec2|ecs|cloud run",
                2.0,
            ),
            (
                r"servers?|cron|aws|gcp|azure|lambda|hotfix|ssh|dns|env vars?|environment variables?|"
                r"monitoring|alerts?|uptime|scaling|cluster|pods?|ingress|ship|shipping|go live",
                1.0,
            ),
        ),
        "testing_validation": (
            (
                r"tests?|testing|tested|pytest|unittest|jest|vitest|mocha|cypress|playwright|rspec|"
                r"phpunit|coverage|fixtures?|mocks?|mocking|e2e|tdd|conftest|assertions?|test suite|"
                r"specs?|flaky|qa",
                2.0,
            ),
            (r"asserts?|validate|validation|verify|verification|regressions?|snapshots?", 1.0),
        ),
        "debugging_errors": (
            (
                r"debug|debugging|debugger|bugs?|buggy|errors?|exceptions?|traceback|stack ?traces?|"
                r"crash|crashes|crashed|crashing|segfault|panics?|[a-z]+error|[a-z]+exception|"
                r"not working|doesn t work|does not work|broken|root cause|pdb|breakpoint|memory leak|"
                r"deadlock|race condition",
                2.0,
            ),
            (
                r"fix|fixes|fixing|fail|fails|failing|failed|failures?|issues?|timeouts?|hangs?|hanging|"
                r"repro|reproduce|warnings?|500|null pointer|undefined",
                1.0,
            ),
        ),
        "code_editing": (
            (
                r"refactor|refactoring|rename|renaming|implement|implementing|implementation|functions?|"
                r"methods?|class|classes|components?|frontend|front end|css|scss|sass|tailwind|html|jsx|"
                r"tsx|react|vue|svelte|angular|next ?js|typescript|javascript|docstrings?|type hints?|ui|"
                r"ux|layout|stylesheets?|styling|button|modal|navbar|dark mode|responsive",
                2.0,
            ),
            (
                r"code|modules?|features?|endpoints?|apis?|handlers?|backend|styles?|forms?|pages?|hooks?|"
                r"props|variables?|python|helpers?|utils?|parser",
                1.0,
            ),
        ),
        "data_schema": (
            (
                r"databases?|db|dbs|sql|postgres|postgresql|psql|mysql|mariadb|sqlite3?|mongo|mongodb|"
                r"schemas?|migrations?|migrate|migrating|alembic|prisma|sqlalchemy|orm|knex|sequelize|"
                r"typeorm|drizzle|flyway|liquibase|select .{1,80} from|insert into|alter table|"
                r"create table|drop table|truncate|foreign key|primary key|constraints?|not null|nullable|"
                r"upsert|pgvector|supabase|dbt|backfill|query plan|explain analyze|indexes",
                2.0,
            ),
            (
                r"tables?|columns?|rows?|index|query|queries|joins?|redis|etl|pandas|dataframes?|csv|"
                r"parquet|seed data|models?|records?|transactions?",
                1.0,
            ),
        ),
        "version_control": (
            (
                r"git|commits?|committing|branch|branches|merge|merging|rebase|rebasing|cherry pick|"
                r"pull requests?|pr|prs|push|pushing|checkout|stash|gitignore|squash|amend|"
                r"merge conflicts?|bisect|revert|blame|reflog",
                2.0,
            ),
            (r"diff|tags?|changelog|upstream|origin|master|remote|clone|fork|github|gitlab|conflicts?", 1.0),
        ),
        "build_dependencies": (
            (
                r"dependency|dependencies|deps|packages?|pip|npm|yarn|pnpm|poetry|pipenv|conda|"
                r"requirements|pyproject|package json|package lock|lockfiles?|lock file|cargo|gradle|"
                r"maven|mvn|webpack|vite|rollup|esbuild|babel|bundler|docker|dockerfile|docker compose|"
                r"containers?|podman|ci|github actions|makefile|build|builds|building|compile|compiling|"
                r"compiler|install|installing|installation|venv|virtualenv|node modules|semver|brew",
                2.0,
            ),
            (
                r"versions?|pin|pinned|images?|pipelines?|workflows?|toolchain|tsconfig|wheel|registry|"
                r"upgrade|lint|linter|ruff|eslint|prettier|mypy|flake8|formatter",
                1.0,
            ),
        ),
        "research_decision_support": (
            (
                r"research|researching|docs|documentation|compare|comparing|comparison|versus|vs|"
                r"alternatives?|trade ?offs?|pros and cons|survey|papers?|arxiv|rfc|benchmarks?|"
                r"evaluate|evaluating|which is better|best practices?|recommendations?|options|websearch|"
                r"webfetch|web search",
                2.0,
            ),
            (
                r"articles?|blog|learn|investigate|explore|how to|how do|library|libraries|frameworks?|"
                r"decide|decision|choose|choosing|choices?|reference|guide|tutorial|examples?|specification|"
                r"faq",
                1.0,
            ),
        ),
        "social_content": (
            (
                r"tweet|tweets|tweeting|tweeted|retweets?|twitter|x com|on x|followers|engagement|"
                r"hashtags?|linkedin|mastodon|bluesky|social media|viral|quote tweet|newsletter|"
                r"instagram|tiktok|youtube|reddit|hacker news|captions?|audience|posting|post on",
                2.0,
            ),
            (
                r"post|posts|thread|threads|reply|replies|likes|dms?|timeline|mentions|announce|"
                r"announcement|launch|content|community|slack|discord",
                1.0,
            ),
        ),
        "file_navigation": (
            (
                r"find files?|locate|list files|list (?:the )?director(?:y|ies)|where (?:is|are|do|does)|"
                r"find where|glob|navigate|explore (?:the )?(?:code ?base|repo|project)|project structure|"
                r"directory structure|file tree|look for|search the (?:code ?base|repo)|grep|ls",
                2.0,
            ),
            (r"director(?:y|ies)|folders?|files?|open|read|view|browse|structure|tree|code ?base", 1.0),
        ),
    }
)
_FAMILY_PATTERNS: tuple[tuple[str, re.Pattern[str], float], ...] = tuple(
    (family, re.compile(rf"(?<![a-z0-9])(?:{words})(?![a-z0-9])"), weight)
    for family, groups in _FAMILY_WORDS.items()
    for words, weight in groups
)
_FAMILY_ORDER = (  # tie-break: the more specific family wins
    "auth_security",
    "data_schema",
    "deployment_ops",
    "version_control",
    "testing_validation",
    "build_dependencies",
    "debugging_errors",
    "social_content",
    "research_decision_support",
    "code_editing",
    "file_navigation",
    "general",
)
_HEAD_WORDS = 8  # keywords among the first words (action + target) weigh more than the trailing context
_MIN_EVIDENCE = 2.0  # keyword weight a family needs to be chosen without a tool prior
_COMMAND_BONUS = 6.0  # the program of a shell command outweighs the words around it


def _normalise(text: str) -> str:
    """Lower case, camelCase split, separators as spaces: the form keyword patterns match against."""
    spaced = _CAMEL.sub(" ", text[:SCAN_LIMIT])
    return _squash(re.sub(r"[^a-z0-9#@+ ]+", " ", spaced.lower().replace("'", " ")))


# the family of changing a running environment, which no file or folder name is evidence of
_NAMED_NOT_DONE = "deployment_ops"


def file_names(command: str) -> frozenset[str]:
    """The words (as keywords read them: :func:`_normalise`) that only name files or folders in a shell
    command: those of the arguments of programs whose words are never a subcommand, a script or a target
    (``mkdir``, ``ls``, ``cat``, ``cd``, ``touch``, ``cp``, ``mv``, ``rm``, ... : shell._OPERAND_PROGRAMS),
    less those the command also uses otherwise (``cd deploy && ./deploy.sh`` runs its deploy script,
    ``mkdir -p deploy && make deploy`` makes its deploy target). ``mkdir -p deploy/k8s``: p, deploy and k8s.
    Read from the lines and words :func:`~spark_pg.intent.shell._segments` reads."""
    named: set[str] = set()
    used: set[str] = set()
    for segment in _segments(command):
        used.update(_normalise(segment[0]).split())
        words = _normalise(" ".join(segment[1:])).split()
        (named if segment[0].lower() in _OPERAND_PROGRAMS else used).update(words)
    return frozenset(named - used)


def _keyword_scores(text: str, names: Collection[str] = ()) -> dict[str, float]:
    """Weight of the distinct keywords each family matches; matches in the first words count 1.5 times.
    ``names``: words that only name files or folders (:func:`file_names`), no evidence of a deployment."""
    norm = _normalise(text)
    head_end = sum(len(w) + 1 for w in norm.split(" ")[:_HEAD_WORDS])
    named = frozenset(names)
    scores: dict[str, float] = {}
    for family, pattern, weight in _FAMILY_PATTERNS:
        seen: set[str] = set()
        for match in pattern.finditer(norm):
            word = match.group(0)
            if word in seen or (family == _NAMED_NOT_DONE and named and named.issuperset(word.split())):
                continue
            seen.add(word)
            factor = 1.5 if match.start() < head_end else 1.0
            scores[family] = scores.get(family, 0.0) + weight * factor
    return scores


_SOCIAL_HOST = re.compile(
    r"\b(?:x|twitter|linkedin|bsky|threads|mastodon\.social|reddit)\.(?:com|app|net|social)\b", re.I
)


def _tool_priors(tool: str) -> dict[str, float]:
    """Evidence the tool itself gives: Read is navigation, WebSearch is research, Edit is code editing..."""
    kind = _tool_kind(tool)
    fixed = {
        "edit": ("code_editing", 1.5),
        "write": ("code_editing", 1.5),
        "read": ("file_navigation", 8.0),
        "glob": ("file_navigation", 9.0),
        "grep": ("file_navigation", 8.0),
        "ls": ("file_navigation", 9.0),
        "websearch": ("research_decision_support", 8.0),
        "webfetch": ("research_decision_support", 8.0),
        "social": ("social_content", 6.0),
    }
    if kind in fixed:
        family, weight = fixed[kind]
        return {family: weight}
    if kind != "other":
        return {}
    mcp = _mcp_parts(tool)
    if mcp is not None and mcp[0] in _SOCIAL_NAMES:  # mcp__x__get_user: a social network's server
        return {"social_content": 4.0}
    tokens = set(_tool_tokens(tool))
    hints = (
        (
            {"sql", "db", "database", "postgres", "supabase", "neon", "mysql", "sqlite", "query"},
            "data_schema",
        ),
        ({"github", "git", "gitlab", "pull", "pr", "commit", "branch"}, "version_control"),
        ({"deploy", "vercel", "netlify", "kubernetes", "k8s", "cloudflare", "aws", "fly"}, "deployment_ops"),
        ({"test", "playwright", "puppeteer", "selenium", "cypress"}, "testing_validation"),
        (
            {"search", "fetch", "docs", "browser", "perplexity", "exa", "context7", "scrape"},
            "research_decision_support",
        ),
        ({"sentry", "logs", "debug"}, "debugging_errors"),
    )
    for words, family in hints:
        if tokens & words:
            return {family: 4.0}
    return {}


def classify_family(tool_name: str, text: str, *, names: Collection[str] | None = None) -> str:
    """The intent family (a key of INTENT_FAMILIES) of a tool call, from the tool and a text about it.

    The tool gives a prior (Read -> file_navigation, WebSearch -> research, Edit -> code_editing); for a
    shell tool the program of the command line decides strongly (git -> version_control, pytest ->
    testing_validation, alembic -> data_schema); keywords of the text add evidence, more for the first words.
    The most specific family wins ties; with no evidence at all the answer is "general".

    ``names``: words that only name files or folders (:func:`file_names`), which are no evidence of
    deployment_ops (``mkdir -p deploy/k8s``, ``cat deploy/values.yaml`` deploy nothing), though they still
    are of the other families (``touch tests/test_auth.py`` is about tests). None: those of a shell
    command on the first line of ``text`` (the line the command's program is read from).
    """
    tool = _clip(tool_name, 200).strip()
    body = _clip(text)
    priors = _tool_priors(tool)
    command = _tool_kind(tool) == "shell" or (not priors and _looks_like_command(body))
    first_line = body.split("\n", 1)[0]
    if names is None:
        names = file_names(first_line) if command else frozenset()
    scores = _keyword_scores(body, names)
    if "research_decision_support" in priors and _SOCIAL_HOST.search(body):
        priors = {"social_content": priors["research_decision_support"]}  # reading a post or a profile
    for family, weight in priors.items():
        scores[family] = scores.get(family, 0.0) + weight
    if command:
        command_family = _command_family(first_line)
        if command_family is not None:
            scores[command_family] = scores.get(command_family, 0.0) + _COMMAND_BONUS
    floor = max(priors.values(), default=_MIN_EVIDENCE - 0.01)
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], _FAMILY_ORDER.index(kv[0])))
    if ranked and ranked[0][1] >= floor:
        return ranked[0][0]
    return "general"


def _looks_like_command(text: str) -> bool:
    """True when a text starts like a shell command of a known program (used for unknown tools)."""
    segment = _main_segment(_segments(text.split("\n", 1)[0][:500]))
    return bool(segment) and _command_family(" ".join(segment)) is not None

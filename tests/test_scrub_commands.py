"""The scrubber (spark_pg/traces/scrub.py) on command lines and SQL: passwords given to docker login -p,
mysql -pX, sshpass, openssl -k, htpasswd -b, PASSWORD '...', IDENTIFIED BY, config set, gh secret set,
redis-cli -a, mongosh -p, sqlcmd -P, ldapsearch -w, keytool -storepass, --db-password and smbclient -U
user%password all came back unchanged. The same short flags mean other things elsewhere (ssh -p 22, mkdir -p,
ls -a): those lines must come back byte for byte.

The fake secrets are assembled from parts so that no secret scanner mistakes this file for a leak.
"""

from __future__ import annotations

import time

import pytest

from spark_pg.traces.scrub import MAX_INPUT, scrub, scrub_report

PW = "Hunt3r" + "2x"  # a password
PW2 = "N3wer" + "Pass9"
TOKEN = "abcdef" + "123456"  # a token
AWS_SECRET = "wJalrXUtnFEMIK7MDENG" + "bPxRfiCYEXAMPLEKEY"  # 38 characters: not the 40 of the bare-key rule
HEX_KEY = "00112233445566778899" + "aabbccddeeff0011"
P, S = "[REDACTED:password]", "[REDACTED:secret]"

# (case, text, what scrub() returns: the whole text)
COMMANDS: list[tuple[str, str, str]] = [
    # docker login and the other registry clients: -p only after the word login
    (
        "docker login -p",
        f"docker login -u bob -p {PW} registry.io",
        f"docker login -u bob -p {P} registry.io",
    ),
    ("podman login -p", f"podman login -p {PW} quay.io", f"podman login -p {P} quay.io"),
    (
        "helm registry login",
        f"helm registry login r.io -u bob -p {PW}",
        f"helm registry login r.io -u bob -p {P}",
    ),
    (
        "after &&, glued and quoted",
        f"cd x && docker login -p'{PW}' ghcr.io",
        f"cd x && docker login -p'{P}' ghcr.io",
    ),
    # mysql and its tools: -pSECRET, glued
    ("mysql -pX", f"mysql -u root -p{PW} shop", f"mysql -u root -p{P} shop"),
    (
        "mysqldump -pX",
        f"mysqldump -uroot -p{PW} --all-databases > dump.sql",
        f"mysqldump -uroot -p{P} --all-databases > dump.sql",
    ),
    (
        "mariadb-dump in docker exec",
        f"docker exec -it db mariadb-dump -uroot -p'{PW}' shop",
        f"docker exec -it db mariadb-dump -uroot -p'{P}' shop",
    ),
    (
        "mysql in kubectl exec",
        f"kubectl exec -it pod -- mysql -uroot -p{PW}",
        f"kubectl exec -it pod -- mysql -uroot -p{P}",
    ),
    (
        "mysql over ssh",
        f"ssh db \"mysql -uroot -p{PW} -e 'select 1'\"",
        f"ssh db \"mysql -uroot -p{P} -e 'select 1'\"",
    ),
    # sshpass: its own -p, not the port of the ssh it runs
    ("sshpass -p", f"sshpass -p {PW} ssh -p 2222 deploy@db", f"sshpass -p {P} ssh -p 2222 deploy@db"),
    ("sshpass -pX", f"sshpass -p{PW} scp f host:/tmp", f"sshpass -p{P} scp f host:/tmp"),
    ("sshpass -P prompt -p", f"sshpass -P assword: -p {PW} ssh h", f"sshpass -P assword: -p {P} ssh h"),
    # openssl: -k password, -K key, -pass pass:X (env:, file:, fd:, stdin name where it is: they stay)
    (
        "openssl -k",
        f"openssl enc -aes-256-cbc -k {PW} -in f -out f.enc",
        f"openssl enc -aes-256-cbc -k {P} -in f -out f.enc",
    ),
    (
        "openssl -K",
        f"openssl enc -aes-128-cbc -K {HEX_KEY} -iv 0 -in f",
        f"openssl enc -aes-128-cbc -K {S} -iv 0 -in f",
    ),
    ("openssl -pass pass:", f"openssl enc -pass pass:{PW} -in f", f"openssl enc -pass pass:{P} -in f"),
    # htpasswd in batch mode: the password is the operand after the user
    ("htpasswd -bc", f"htpasswd -bc .htpasswd admin {PW}", f"htpasswd -bc .htpasswd admin {P}"),
    ("htpasswd -nb", f"htpasswd -nb admin {PW}", f"htpasswd -nb admin {P}"),
    ("htpasswd in markdown", f"run `htpasswd -nb admin {PW}` first", f"run `htpasswd -nb admin {P}` first"),
    (
        "htpasswd -bB -C 12, quoted",
        f"sudo htpasswd -bB -C 12 /etc/nginx/.htpasswd admin '{PW}' && nginx -s reload",
        f"sudo htpasswd -bB -C 12 /etc/nginx/.htpasswd admin '{P}' && nginx -s reload",
    ),
    # SQL
    (
        "create role password",
        f"CREATE ROLE app LOGIN PASSWORD '{PW}'",
        f"CREATE ROLE app LOGIN PASSWORD '{P}'",
    ),
    (
        "encrypted password",
        f"ALTER ROLE app WITH ENCRYPTED PASSWORD '{PW}' VALID UNTIL 'infinity'",
        f"ALTER ROLE app WITH ENCRYPTED PASSWORD '{P}' VALID UNTIL 'infinity'",
    ),
    ("double-quoted password", f'ALTER USER x WITH PASSWORD "{PW}"', f'ALTER USER x WITH PASSWORD "{P}"'),
    (
        "in psql -c",
        f"psql -c \"CREATE ROLE app PASSWORD '{PW}'\"",
        f"psql -c \"CREATE ROLE app PASSWORD '{P}'\"",
    ),
    ("identified by", f"ALTER USER app IDENTIFIED BY '{PW}'", f"ALTER USER app IDENTIFIED BY '{P}'"),
    (
        "identified with plugin by",
        f"CREATE USER 'app'@'%' IDENTIFIED WITH mysql_native_password BY '{PW}';",
        f"CREATE USER 'app'@'%' IDENTIFIED WITH mysql_native_password BY '{P}';",
    ),
    (
        "identified by, unquoted",
        f"CREATE USER app IDENTIFIED BY {PW};",
        f"CREATE USER app IDENTIFIED BY {P};",
    ),
    (
        "mysql password()",
        f"SET PASSWORD FOR 'bob'@'%' = PASSWORD('{PW}')",
        f"SET PASSWORD FOR 'bob'@'%' = PASSWORD('{P}')",
    ),
    (
        "sql server N''",
        f"CREATE LOGIN app WITH PASSWORD = N'{PW}'",
        f"CREATE LOGIN app WITH PASSWORD = N'{P}'",
    ),
    # chosen: a quoted literal after the word password is a password, in prose too
    ("password 'x' in prose", "the password 'field' is required", f"the password '{P}' is required"),
    # config commands setting a secret-named key
    (
        "aws configure set",
        f"aws configure set aws_secret_access_key {AWS_SECRET}",
        f"aws configure set aws_secret_access_key {S}",
    ),
    (
        "aws configure set --profile",
        f"aws configure set --profile prod aws_session_token {TOKEN}",
        f"aws configure set --profile prod aws_session_token {S}",
    ),
    ("npm config set", f"npm config set _authToken {TOKEN}", f"npm config set _authToken {S}"),
    (
        "npm config set, registry scoped",
        f"npm config set //registry.npmjs.org/:_authToken {TOKEN}",
        f"npm config set //registry.npmjs.org/:_authToken {S}",
    ),
    ("yarn config set", f"yarn config set npmAuthToken {TOKEN}", f"yarn config set npmAuthToken {S}"),
    ("git config", f"git config --global github.token {TOKEN}", f"git config --global github.token {S}"),
    # gh secret set
    ("gh secret set --body", f"gh secret set API_KEY --body {TOKEN}", f"gh secret set API_KEY --body {S}"),
    (
        "gh secret set -b",
        f"gh secret set API_KEY -b {TOKEN} --repo acme/api",
        f"gh secret set API_KEY -b {S} --repo acme/api",
    ),
    (
        "gh secret set --body=",
        f'gh secret set API_KEY --body="{TOKEN}"',
        f'gh secret set API_KEY --body="{S}"',
    ),
    # database and directory clients
    ("redis-cli -a", f"redis-cli -h cache -p 6379 -a {PW} ping", f"redis-cli -h cache -p 6379 -a {P} ping"),
    (
        "mongosh -p",
        f"mongosh -u admin -p {PW} --authenticationDatabase admin",
        f"mongosh -u admin -p {P} --authenticationDatabase admin",
    ),
    ("mongodump -p", f"mongodump -u admin -p {PW} --out /backup", f"mongodump -u admin -p {P} --out /backup"),
    ("sqlcmd -P", f"sqlcmd -S db -U sa -P {PW} -Q 'select 1'", f"sqlcmd -S db -U sa -P {P} -Q 'select 1'"),
    ("bcp -PX", f"bcp t out f.dat -S db -U sa -P{PW} -c", f"bcp t out f.dat -S db -U sa -P{P} -c"),
    (
        "ldapsearch -w",
        f"ldapsearch -x -D cn=admin,dc=x -w {PW} -b dc=x",
        f"ldapsearch -x -D cn=admin,dc=x -w {P} -b dc=x",
    ),
    (
        "ldappasswd -w -a -s",
        f"ldappasswd -x -D cn=admin -w {PW} -a {PW} -s {PW2} uid=bob",
        f"ldappasswd -x -D cn=admin -w {P} -a {P} -s {P} uid=bob",
    ),
    ("smbmap -p", f"smbmap -H files -u bob -p {PW}", f"smbmap -H files -u bob -p {P}"),
    # keytool and jarsigner: unambiguous names, any command
    (
        "keytool",
        f"keytool -importkeystore -srcstorepass {PW} -deststorepass {PW} -destkeypass {PW}",
        f"keytool -importkeystore -srcstorepass {P} -deststorepass {P} -destkeypass {P}",
    ),
    (
        "jarsigner",
        f"jarsigner -storepass {PW} -keypass {PW} app.jar key",
        f"jarsigner -storepass {P} -keypass {P} app.jar key",
    ),
    # a long flag whose name ends in password, token, secret, api-key after a prefix
    (
        "prefixed flags",
        f"tool --db-password {PW} --admin-token {TOKEN}",
        f"tool --db-password {P} --admin-token {S}",
    ),
    ("prefixed, underscore, quoted", f"deploy --smtp_password '{PW}'", f"deploy --smtp_password '{P}'"),
    ("prefixed, one dash", f"vault-agent -root-token {TOKEN}", f"vault-agent -root-token {S}"),
    ("prefixed api key", f"cli --openai-api-key {TOKEN}", f"cli --openai-api-key {S}"),
    # Samba: user%password, the user stays
    ("smbclient -U", f"smbclient //files/share -U bob%{PW}", f"smbclient //files/share -U bob%{P}"),
    ("rpcclient -U quoted", f"rpcclient -U 'CORP\\bob%{PW}' dc01", f"rpcclient -U 'CORP\\bob%{P}' dc01"),
    ("net -U", f"net rpc password bob -U admin%{PW} -S dc01", f"net rpc password bob -U admin%{P} -S dc01"),
]

# (case, text): each must come back byte for byte
NEAR_MISSES: list[tuple[str, str]] = [
    ("ssh port", "ssh -p 22 host"),
    ("docker run port", "docker run -p 8080:80 img"),
    ("mkdir -p", "mkdir -p a/b"),
    ("mysql asks, shop is the database", "mysql -u root -p shop"),
    ("mysql asks", "mysql -u root -p"),
    ("psql --no-password", "psql --no-password mydb"),
    ("docker --password-stdin", "docker login --password-stdin -u bob"),
    ("openssl env:", "openssl enc -pass env:KEY"),
    ("openssl file:", "openssl -passin file:pw.txt"),
    ("tar", "tar -k -w"),
    ("grep -P", "grep -P '\\d+' f"),
    ("ls -a", "ls -a"),
    ("git commit -a", "git commit -a -m x"),
    ("htpasswd, interactive", "htpasswd -c .htpasswd admin"),
    ("password null", "ALTER USER app PASSWORD NULL"),
    ("password parameter", "CREATE ROLE app PASSWORD $1"),
    ("gh secret from a file", "gh secret set API_KEY < key.txt"),
    ("aws region", "aws configure set region us-east-1"),
    ("git user name", "git config --global user.name Bob"),
    ("npm registry", "npm config set registry https://x"),
    # ports after -p on a line that names a command reading -p elsewhere
    ("mysql container port", "docker run -d --name mysql -p 3306:3306 mysql:8"),
    ("mysql container port, glued", "docker run -d --name mysql -p3306:3306 mysql:8"),
    ("mongo container port", "docker run -d --name mongo -p 27017:27017 mongo"),
    ("sshpass from a file", "sshpass -f pw.txt ssh -p 22 host"),
    ("sshpass from the environment", "sshpass -e ssh -p 22 host"),
    ("mysqldump asks", "mysqldump -u root -p --all-databases > dump.sql"),
    ("mysql asks in a container", "docker exec -it db mysql -uroot -p"),
    ("mysql-router is not mysql", "mysql-router -pfoo; mysqlx_port -pbar"),
    ("a reference after -p", "mysql -u root -p${DB_PASSWORD} shop; docker login -u bob -p $DOCKER_PASSWORD"),
    (
        "docker login in prose",
        "Before docker login, use --password-stdin instead of -p so the password stays out of shell history.",
    ),
    ("redis port", "redis-cli -h cache -p 6379 ping"),
    ("redis reference", "redis-cli -a $REDIS_PASSWORD ping"),
    ("gh pr body", "gh pr create --title x --body 'Fixes the bug' && gh issue comment 12 -b done"),
    (
        "config reads",
        "npm config get _authToken; git config --get github.token; aws configure get aws_secret_access_key",
    ),
    ("git credential helper", "git config --global credential.helper store"),
    # flags that end in password / token but take no value: the next word is no secret
    ("ask", "ansible-playbook --ask-vault-password site.yml"),
    ("reset", "tool --reset-password bob"),
    ("allow empty", "tool --allow-empty-password db"),
    ("show", "tool --show-token prod"),
    ("with token from a file", "gh auth login --with-token < token.txt"),
    ("skip, require, generate", "tool --skip-password db --require-password admin --generate-password bob"),
    ("a limit", "tool --max-token 512"),
    ("file flags", "tool --api-key-file key.txt --token-file t --secret-name x"),
    ("keytool from the environment", "keytool -list -storepass:env STOREPASS"),
    ("random password", "ALTER USER 'u'@'%' IDENTIFIED WITH caching_sha2_password BY RANDOM PASSWORD"),
    ("identified by in prose", "tasks identified by id"),
    ("smbclient asks", "smbclient //h/s -U bob"),
    ("smbclient reference", "smbclient -L h -U bob%$SMB_PASSWORD"),
    ("ldap asks", "ldapsearch -x -W -D cn=admin -b dc=x"),
    ("htpasswd verify", "htpasswd -v .htpasswd admin"),
    ("openssl stdin, fd", "openssl enc -pass stdin -in f; openssl rsa -passin fd:3 -in k"),
    ("docker stdin", "echo $PW | docker login -u bob --password-stdin"),
    # a backtick ends a value: markdown code, a command substitution
    ("flags in markdown", "set `--max-token 512` and read the `--password option` docs"),
]


@pytest.mark.parametrize(("case", "text", "expected"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_passwords_on_command_lines_are_replaced(case: str, text: str, expected: str) -> None:
    out = scrub(text)
    assert out == expected, case
    assert scrub(out) == out  # idempotent


@pytest.mark.parametrize(("case", "text"), NEAR_MISSES, ids=[n[0] for n in NEAR_MISSES])
def test_other_uses_of_the_same_flags_survive(case: str, text: str) -> None:
    assert scrub(text) == text


def test_the_report_names_the_rules() -> None:
    text = (
        f"docker login -p {PW} r.io\nCREATE ROLE app PASSWORD '{PW}'\nhtpasswd -nb admin {PW}\n"
        f"npm config set _authToken {TOKEN}\nsmbclient -U bob%{PW} //h/s\nALTER USER a IDENTIFIED BY '{PW}'"
    )
    report = scrub_report(text)
    assert PW not in report.text and TOKEN not in report.text
    assert report.found == {
        "command_flag": 1,
        "sql_password": 1,
        "htpasswd": 1,
        "config_set": 1,
        "smb_user": 1,
        "sql_identified_by": 1,
    }


def test_hostile_input_for_the_command_forms_is_bounded() -> None:
    """Each unit repeated to MAX_INPUT characters: many matches, each looking back at most 300 characters.
    The bound is the 1.5 s of the other hostile-input tests, or 20 times a plain text's time on a machine
    slow enough to need more."""
    plain = ("a b " * (MAX_INPUT // 4))[:MAX_INPUT]
    started = time.perf_counter()
    scrub(plain)
    limit = max(1.5, 20 * (time.perf_counter() - started))
    units = [
        "mysql -p",
        "mysql -pa ",
        "mysqlx -pa ",
        "-p ",
        "-pa ",
        "-p '",
        "PASSWORD '",
        "PASSWORD 'a' ",
        "PASSWORD(",
        "password = N'",
        "docker login -p ",
        "dockerx login -pa ",
        "sshpass -p x ssh -p ",
        "htpasswd -b ",
        "htpasswd -nb a b ",
        "IDENTIFIED BY ",
        "IDENTIFIED WITH x BY PASSWORD ",
        "config set token ",
        "git config --global a.token ",
        "--db-password ",
        "--no-password ",
        "-" + "a" * 59 + "-password x ",
        "smbclient -U a%",
        "net -U a%b ",
        "gh secret set x --body ",
        "-storepass x ",
        "npmAuthTokenAuthToken x ",
        "mysql" + " " * 280 + "-pa ",
    ]
    for unit in units:
        text = (unit * (MAX_INPUT // len(unit) + 1))[:MAX_INPUT]
        started = time.perf_counter()
        scrub(text)
        assert time.perf_counter() - started < limit, unit

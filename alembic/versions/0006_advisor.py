"""The advisor's tables: trigger rules, the retrieval log, outcomes, learned fusion weights; actionability.

- ``spark.trigger_rules``: static rules compiled from YAML and learned ones (shadow until promoted). Each
  names the memory keys it surfaces; spark.retrieve matches them in its trigger pool.
- ``spark.retrievals`` + ``spark.retrieval_items``: every advise call and what it surfaced, with the separate
  signals (the basis of outcome attribution and of fitting fusion weights).
- ``spark.trigger_shadow_hits``: what a shadow rule would have surfaced, to measure its precision.
- ``spark.outcomes``: followed / helpful / unhelpful / ignored per surfaced item.
- ``spark.fusion_weights``: weights fitted per tenant, with their sample size and held-out comparison.
- ``spark.memories.actionability``: the structured actionability score given at ingestion (NULL: not
  scored, which never gates).

Every table carries ``tenant`` first in its key (design.md, Scale).

Revision ID: 0006_advisor
Revises: 0005_tenant_stats
Create Date: 2026-11-22
"""

from alembic import op

revision = "0006_advisor"
down_revision = "0005_tenant_stats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE spark.memories
            ADD COLUMN actionability real CHECK (actionability BETWEEN 0 AND 1),
            ADD CONSTRAINT memories_action_domain_len CHECK (length(action_domain) BETWEEN 1 AND 64);
        COMMENT ON COLUMN spark.memories.actionability IS
            'Structured actionability in 0..1 (directive, condition, specificity, not an observation), given at '
            'ingestion; NULL = not scored. The advisor drops memories below its gate.';
        COMMENT ON COLUMN spark.memories.action_domain IS
            'What kind of action this memory can advise (code, system, data, security, research, social, '
            'user_context, training_log, general), given at ingestion; NULL counts as general.';

        CREATE TABLE spark.trigger_rules (
            tenant          text NOT NULL CHECK (tenant <> '' AND length(tenant) <= 128),
            name            text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.:-]{1,64}$'),
            pattern         text NOT NULL CHECK (length(pattern) BETWEEN 1 AND 500),
            context_pattern text CHECK (length(context_pattern) BETWEEN 1 AND 500),
            surface         text[] NOT NULL CHECK (cardinality(surface) BETWEEN 1 AND 50),
            priority        text NOT NULL DEFAULT 'normal'
                                CHECK (priority IN ('critical', 'high', 'normal', 'background')),
            interrupt       boolean NOT NULL DEFAULT false,
            origin          text NOT NULL DEFAULT 'static' CHECK (origin IN ('static', 'learned')),
            confidence      real NOT NULL DEFAULT 1 CHECK (confidence BETWEEN 0 AND 1),
            shadow          boolean NOT NULL DEFAULT false,
            metadata        jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
            created_at      timestamptz NOT NULL DEFAULT now(),
            updated_at      timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, name)
        );
        COMMENT ON TABLE spark.trigger_rules IS
            'Trigger rules: when pattern (and context_pattern, if any) matches the trigger text of a call, '
            'case-insensitively, the memories keyed in surface join the candidates (trigger pool) and bypass '
            'the similarity gate. Static rules come from YAML; learned ones start in shadow (matched and '
            'logged, never surfaced). Written through spark.put_trigger_rule, which validates patterns.';

        CREATE TABLE spark.retrievals (
            tenant        text NOT NULL,
            id            bigint GENERATED ALWAYS AS IDENTITY,
            session_id    text,
            tool_name     text,
            intent_family text,
            query_text    text NOT NULL,
            trigger_text  text,
            params        jsonb NOT NULL DEFAULT '{}',
            created_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, id)
        );
        CREATE INDEX retrievals_session_idx ON spark.retrievals (tenant, session_id, created_at);
        COMMENT ON TABLE spark.retrievals IS 'One row per advise call: who asked what, and when.';

        CREATE TABLE spark.retrieval_items (
            tenant       text NOT NULL,
            retrieval_id bigint NOT NULL,
            memory_id    bigint NOT NULL,
            memory_tenant text NOT NULL,  -- the tenant's own, or the cold-start pack's (_system)
            rank         integer NOT NULL CHECK (rank >= 1),
            score        real NOT NULL,
            signals      jsonb NOT NULL,
            pools        text[] NOT NULL,
            PRIMARY KEY (tenant, retrieval_id, memory_id),
            FOREIGN KEY (tenant, retrieval_id) REFERENCES spark.retrievals (tenant, id) ON DELETE CASCADE,
            FOREIGN KEY (memory_tenant, memory_id) REFERENCES spark.memories (tenant, id) ON DELETE CASCADE
        );
        CREATE INDEX retrieval_items_memory_idx ON spark.retrieval_items (memory_tenant, memory_id);
        COMMENT ON TABLE spark.retrieval_items IS
            'What an advise call surfaced, in rank order, with its fused score and separate signals.';

        CREATE TABLE spark.trigger_shadow_hits (
            tenant       text NOT NULL,
            retrieval_id bigint NOT NULL,
            rule_name    text NOT NULL,
            memory_id    bigint NOT NULL,
            PRIMARY KEY (tenant, retrieval_id, rule_name, memory_id),
            FOREIGN KEY (tenant, retrieval_id) REFERENCES spark.retrievals (tenant, id) ON DELETE CASCADE,
            FOREIGN KEY (tenant, rule_name) REFERENCES spark.trigger_rules (tenant, name)
                ON DELETE CASCADE ON UPDATE CASCADE,
            FOREIGN KEY (tenant, memory_id) REFERENCES spark.memories (tenant, id) ON DELETE CASCADE
        );
        COMMENT ON TABLE spark.trigger_shadow_hits IS
            'What a shadow (learned, unpromoted) trigger rule would have surfaced in an advise call.';

        CREATE TABLE spark.outcomes (
            tenant       text NOT NULL,
            id           bigint GENERATED ALWAYS AS IDENTITY,
            retrieval_id bigint,
            memory_id    bigint NOT NULL,
            memory_tenant text NOT NULL,  -- the tenant's own, or the cold-start pack's (_system)
            session_id   text,
            outcome      text NOT NULL CHECK (outcome IN ('followed', 'helpful', 'unhelpful', 'ignored')),
            source       text NOT NULL DEFAULT 'api' CHECK (source <> '' AND length(source) <= 64),
            created_at   timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, id),
            FOREIGN KEY (tenant, retrieval_id) REFERENCES spark.retrievals (tenant, id)
                ON DELETE SET NULL (retrieval_id),
            FOREIGN KEY (memory_tenant, memory_id) REFERENCES spark.memories (tenant, id) ON DELETE CASCADE
        );
        CREATE INDEX outcomes_memory_idx ON spark.outcomes (memory_tenant, memory_id);
        CREATE INDEX outcomes_session_idx ON spark.outcomes (tenant, session_id);
        COMMENT ON TABLE spark.outcomes IS
            'Outcome signals per surfaced item (record_outcome): the input of reliability, learned weights, '
            'learned triggers and the north-star metric.';

        CREATE TABLE spark.fusion_weights (
            tenant    text PRIMARY KEY,
            weights   jsonb NOT NULL CHECK (jsonb_typeof(weights) = 'object'),
            samples   integer NOT NULL CHECK (samples >= 0),
            evaluation jsonb NOT NULL DEFAULT '{}',
            in_use    boolean NOT NULL DEFAULT false,
            fitted_at timestamptz NOT NULL DEFAULT now()
        );
        COMMENT ON TABLE spark.fusion_weights IS
            'Fusion weights fitted per tenant from logged signals and outcomes, with the sample size and the '
            'held-out comparison against the defaults; used only when in_use (they beat the defaults).';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE spark.fusion_weights;
        DROP TABLE spark.outcomes;
        DROP TABLE spark.trigger_shadow_hits;
        DROP TABLE spark.retrieval_items;
        DROP TABLE spark.retrievals;
        DROP TABLE spark.trigger_rules;
        ALTER TABLE spark.memories DROP CONSTRAINT memories_action_domain_len, DROP COLUMN actionability;
        """
    )

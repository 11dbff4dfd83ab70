-- Optional row-level security for deployments whose tenants are database roles: the three blocks of
-- docs/security.md ("Setup with one role per tenant"), the same text (tests/test_bench_rls.py compares
-- them). `spark-pg bench rls` applies them in its scratch database, with its own role names for
-- spark_tenant and alice.

-- [rls-grants]
DO $$ BEGIN  -- the role is the server's: a second database of the same server reuses it
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'spark_tenant') THEN
        CREATE ROLE spark_tenant NOLOGIN;
    END IF;
END $$;
GRANT USAGE ON SCHEMA spark TO spark_tenant;
GRANT SELECT ON ALL TABLES IN SCHEMA spark TO spark_tenant;
GRANT INSERT, UPDATE, DELETE ON spark.memories, spark.embeddings, spark.embed_queue, spark.trigger_rules,
    spark.trigger_shadow_hits, spark.retrievals, spark.retrieval_items, spark.advice_shown, spark.outcomes,
    spark.query_embeddings, spark.revaluations, spark.fusion_weights, spark.tenant_stats, spark.lexeme_stats
    TO spark_tenant;
GRANT SELECT ON SEQUENCE spark.retrievals_id_seq TO spark_tenant;  -- currval() in spark.advise_with_warnings
GRANT SELECT ON public.spark_alembic_version TO spark_tenant;   -- the CLI and SparkClient check the schema

-- [rls-policies]
ALTER TABLE spark.memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.embed_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.trigger_rules ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.trigger_shadow_hits ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.retrievals ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.retrieval_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.advice_shown ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.outcomes ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.query_embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.revaluations ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.fusion_weights ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.tenant_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.lexeme_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE spark.tenant_vector_indexes ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_own ON spark.memories USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.embeddings USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.embed_queue USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.trigger_rules USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.trigger_shadow_hits USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.retrievals USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.retrieval_items USING (tenant = current_user::text)
    WITH CHECK (tenant = current_user::text AND memory_tenant IN (current_user::text, spark.system_tenant()));
CREATE POLICY tenant_own ON spark.advice_shown USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.outcomes USING (tenant = current_user::text)
    WITH CHECK (tenant = current_user::text AND memory_tenant IN (current_user::text, spark.system_tenant()));
CREATE POLICY tenant_own ON spark.query_embeddings USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.revaluations USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.fusion_weights USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.tenant_stats USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.lexeme_stats USING (tenant = current_user::text);
CREATE POLICY tenant_own ON spark.tenant_vector_indexes USING (tenant = current_user::text);

CREATE POLICY pack_read ON spark.memories FOR SELECT USING (tenant = spark.system_tenant());
CREATE POLICY pack_read ON spark.embeddings FOR SELECT USING (tenant = spark.system_tenant());
CREATE POLICY pack_read ON spark.trigger_rules FOR SELECT USING (tenant = spark.system_tenant());
CREATE POLICY pack_read ON spark.tenant_stats FOR SELECT USING (tenant = spark.system_tenant());
CREATE POLICY pack_read ON spark.lexeme_stats FOR SELECT USING (tenant = spark.system_tenant());
CREATE POLICY pack_read ON spark.tenant_vector_indexes FOR SELECT USING (tenant = spark.system_tenant());

-- [rls-tenant]
CREATE ROLE alice LOGIN IN ROLE spark_tenant;

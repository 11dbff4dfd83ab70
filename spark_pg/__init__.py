"""spark_pg: the retrieval layer for AI-agent memory, living in PostgreSQL + pgvector.

Heavy libraries (fastembed, onnxruntime, alembic) are imported only when used.
"""

from spark_pg.errors import SparkPgError

__all__ = ["SparkPgError", "__version__"]
__version__ = "0.1.0"

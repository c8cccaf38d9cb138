"""PostgreSQL adapter: connections, named queries from .sql files, migrations."""

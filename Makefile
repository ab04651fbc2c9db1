# Convenience targets; each one only calls a hack/ script (the scripts are the real interface).
.PHONY: test unit lint slurm-up slurm-down slurm-status pg-up pg-down pg-status down

test:            ## the whole suite: gates, then every test (starts the local services it needs)
	hack/test.sh

unit:            ## gates, then the pure unit tests only
	hack/test.sh -m unit

lint:            ## the gates only: ruff, mypy, lint-imports
	.venv/bin/ruff check operator tests $(wildcard benchmarks) && .venv/bin/mypy && .venv/bin/lint-imports

slurm-up:        ## local Slurm cluster (NODES=N to change the node count)
	hack/local-slurm.sh up $(if $(NODES),--nodes $(NODES))

slurm-down:
	hack/local-slurm.sh down

slurm-status:
	hack/local-slurm.sh status

pg-up:           ## local PostgreSQL on 127.0.0.1:15432
	hack/local-postgres.sh up

pg-down:
	hack/local-postgres.sh down

pg-status:
	hack/local-postgres.sh status

down: slurm-down pg-down   ## stop every local service

# AWS SAM targets: template tools, template checks, and the CoreLayer build.
#
# Included by the root Makefile; also usable alone from the repo root:
#   make -f infra/sam.mk tools template-check
# `sam build` runs `build-CoreLayer` through src/Makefile (see template.yaml, CoreLayer).
# Paths are absolute (from this file's location) because SAM runs make in a scratch directory.

SAM_MK_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
_SAM_MK_PREVIOUS_GOAL := $(.DEFAULT_GOAL)

# The template tools live in their own venv: cfn-lint, aws-sam-cli and checkov pin conflicting
# versions of shared dependencies (boto3, aws-sam-translator) against the project's.
TOOLS_PYTHON ?= python3
TOOLS_VENV := $(SAM_MK_ROOT)/.venv-tools
TOOLS_BIN := $(TOOLS_VENV)/bin
TOOLS_STAMP := $(TOOLS_VENV)/.stamp-tools
TOOLS_REQUIREMENTS := $(SAM_MK_ROOT)/infra/requirements-tools.txt
SAM_TEMPLATE := $(SAM_MK_ROOT)/template.yaml

# CoreLayer target platform: must match template.yaml (Globals Architectures/Runtime, CoreLayer);
# tests/infra checks that they agree.
LAYER_ARCH := arm64
LAYER_PYTHON_VERSION := 3.12
# Any Python >= 3.11 with pip; wheels are chosen for the Lambda platform, not for this one.
LAYER_PYTHON ?= python3

.PHONY: tools template-check build-CoreLayer

tools: $(TOOLS_STAMP)

# Filled by uv, as the project's venv is (the root Makefile says why; it uses this requirement).
UV_REQUIREMENT := uv>=0.9,<1
$(TOOLS_STAMP): $(TOOLS_REQUIREMENTS)
	$(TOOLS_PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_BIN)/python -m pip install --quiet --disable-pip-version-check '$(UV_REQUIREMENT)'
	$(TOOLS_BIN)/uv pip install --quiet --python $(TOOLS_BIN)/python -r $(TOOLS_REQUIREMENTS)
	touch $@

# Offline-tolerant: no telemetry, no platform download; checkov skips are only in resource
# Metadata with a written comment (never --skip-check here).
template-check: $(TOOLS_STAMP)
	$(TOOLS_BIN)/cfn-lint $(SAM_TEMPLATE)
	cd $(SAM_MK_ROOT) && SAM_CLI_TELEMETRY=0 $(TOOLS_BIN)/sam validate --lint --template-file $(SAM_TEMPLATE)
	$(TOOLS_BIN)/checkov -f $(SAM_TEMPLATE) --framework cloudformation --skip-download --compact --quiet

build-CoreLayer:
	$(if $(ARTIFACTS_DIR),,$(error ARTIFACTS_DIR is not set: this target is run by `sam build`))
	$(LAYER_PYTHON) $(SAM_MK_ROOT)/infra/layer/build.py "$(ARTIFACTS_DIR)" --arch $(LAYER_ARCH) --python-version $(LAYER_PYTHON_VERSION)

# Do not become the including Makefile's default goal.
.DEFAULT_GOAL := $(_SAM_MK_PREVIOUS_GOAL)

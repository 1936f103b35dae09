"""What every bench test runs under: AWS is only ever reached through an emulator.

The environment below carries dummy credentials and no profile before anything builds a boto3
session: a client built without an endpoint would sign with "testing" and fail, never act on a
real account.
"""

from __future__ import annotations

import os

for _name in (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_SNS",
    "AWS_REGION",
):
    os.environ.pop(_name, None)
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)

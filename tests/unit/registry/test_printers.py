import datetime

import pytest

from services.apis.install import new_catalogue
from services.apiserver import printers

CATALOGUE = new_catalogue()


@pytest.mark.parametrize("seconds,text", [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (5, "5s"), (119, "119s"), (120, "2m"), (182, "3m2s"),
    (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"),
    (47 * 3600, "47h"), (48 * 3600, "2d"), (50 * 3600, "2d2h"), (8 * 86400, "8d"), (400 * 86400, "400d"),
    (730 * 86400, "2y"), (731 * 86400, "2y1d"), (9 * 365 * 86400, "9y"),
])
def test_human_duration(seconds, text):
    assert printers.human_duration(seconds) == text


def test_age_and_columns():
    now = datetime.datetime(2024, 1, 1, 0, 5, tzinfo=datetime.timezone.utc)
    assert printers.age({"metadata": {"creationTimestamp": "2024-01-01T00:00:00Z"}}, now) == "5m"
    assert printers.age({"metadata": {}}) == "<unknown>"
    # the kinds printed as Name, <extra columns>, Age
    names = {r.plural: [c["name"] for c in r.table.columns] for r in CATALOGUE.kinds()
             if r.table is not None and r.table.name_age and len(r.table.columns) > 2}
    assert names == {"namespaces": ["Name", "Status", "Age"], "configmaps": ["Name", "Data", "Age"],
                     "secrets": ["Name", "Type", "Data", "Age"], "serviceaccounts": ["Name", "Secrets", "Age"],
                     "apiservices": ["Name", "Service", "Available", "Age"],
                     "leases": ["Name", "Holder", "Age"],
                     "validatingadmissionpolicies": ["Name", "Validations", "ParamKind", "Age"],
                     "mutatingadmissionpolicies": ["Name", "Mutations", "ParamKind", "Age"],
                     "validatingadmissionpolicybindings": ["Name", "PolicyName", "ParamRef", "Age"],
                     "mutatingadmissionpolicybindings": ["Name", "PolicyName", "ParamRef", "Age"],
                     "mutatingwebhookconfigurations": ["Name", "Webhooks", "Age"],
                     "validatingwebhookconfigurations": ["Name", "Webhooks", "Age"]}
    assert all(c["priority"] == 0 for c in printers.column_definitions(CATALOGUE.convertor("", "secrets")))

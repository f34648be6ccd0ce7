"""fl_lightning.resolve.resolve_part: the one resolver of None | name | {class_path, init_args} | mapping | object."""
import pytest

from fl_lightning.errors import ConfigError
from fl_lightning.privacy import PrivacyOptions, resolve_privacy
from fl_lightning.resolve import resolve_part
from fl_lightning.systems import RoundPolicy, SystemModel, resolve_policy, resolve_system
from fl_lightning.systems.fedbuff import Asynchronous, resolve_asynchronous


def test_each_form_of_a_part_resolves_to_the_same_object():
    made = resolve_policy("wait_for_all")
    assert isinstance(made, RoundPolicy) and made.kind == "wait_for_all"
    assert resolve_policy(made) is made and resolve_policy(None) is None
    again = resolve_policy(made.spec())  # a checkpoint's hparams: {class_path, init_args}
    assert again.spec() == made.spec()
    assert resolve_system("mobile").spec() == resolve_system(resolve_system("mobile").spec()).spec()
    assert resolve_asynchronous("fedbuff").spec() == resolve_asynchronous(resolve_asynchronous("fedbuff").spec()).spec()
    options = resolve_privacy({"noise_multiplier": 1.0, "clip": 0.5})
    assert options == PrivacyOptions(noise_multiplier=1.0, clip=0.5) and resolve_privacy("none") is None


@pytest.mark.parametrize("value, option, message", [
    (3, "model.round_policy", "needs a policy name"),
    (RoundPolicy, "model.round_policy", "got the class RoundPolicy; pass an instance"),
    ({"class_path": "fl_lightning.systems.SystemModel", "init_args": {}}, "model.round_policy", "cannot import"),
    ({"class_path": "no.such.Thing"}, "model.round_policy", "cannot import 'no.such.Thing' as a RoundPolicy"),
])
def test_anything_else_is_one_line_naming_the_option(value, option, message):
    with pytest.raises(ConfigError) as err:
        resolve_policy(value)
    assert err.value.field == option and message in str(err.value) and "\n" not in str(err.value)


def test_a_mapping_with_an_unknown_key_names_it():
    with pytest.raises(ConfigError) as err:
        resolve_part({"speed": 2}, Asynchronous, "model.asynchronous", "fedbuff or an Asynchronous")
    assert err.value.field == "model.asynchronous" and "speed" in str(err.value)
    with pytest.raises(ConfigError) as err:
        resolve_privacy({"noise": 1.0})
    assert err.value.field == "model.privacy.noise"
    assert isinstance(resolve_system(SystemModel(profile="uniform")), SystemModel)

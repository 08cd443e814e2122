"""GENERATED from kafka_schemas/ by records.write_generated_validators() (`make validators`): do not edit.

The straight-line validator of every record type and version elrwatch reads (records.validator_source); a
test fails when this file is not what the schemas give.
"""

# ruff: noqa
from elrwatch.state.value_checks import MISSING as M
from elrwatch.state.value_checks import SEMANTICS as _SEMANTICS
from elrwatch.state.value_checks import VALID_UUIDS as U
from elrwatch.state.value_checks import Invalid
from elrwatch.state.value_checks import is_uuid
from elrwatch.state.value_checks import no_semantics as _no_semantics


check_broker_registration_change_record = _SEMANTICS.get('BROKER_REGISTRATION_CHANGE_RECORD', _no_semantics)


def validate_broker_registration_change_record_v0(data):
    try:
        v0 = data['brokerId']
        v1 = data['brokerEpoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -9223372036854775808 or v1 > 9223372036854775807:
        return None
    out = {'brokerId': v0, 'brokerEpoch': v1}
    get = data.get
    left = len(data) - 2
    if left:
        v2 = get('fenced', M)
        if v2 is not M:
            left -= 1
            if v2 is None:
                return None
            else:
                if type(v2) is not int or v2 < -128 or v2 > 127:
                    return None
                out['fenced'] = v2
    if len(data) != len(out):
        return None
    try:
        check_broker_registration_change_record(out)
    except Invalid:
        return None
    return out


def validate_broker_registration_change_record_v1(data):
    try:
        v0 = data['brokerId']
        v1 = data['brokerEpoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -9223372036854775808 or v1 > 9223372036854775807:
        return None
    out = {'brokerId': v0, 'brokerEpoch': v1}
    get = data.get
    left = len(data) - 2
    if left:
        v2 = get('fenced', M)
        if v2 is not M:
            left -= 1
            if v2 is None:
                return None
            else:
                if type(v2) is not int or v2 < -128 or v2 > 127:
                    return None
                out['fenced'] = v2
        if left:
            v3 = get('inControlledShutdown', M)
            if v3 is not M:
                left -= 1
                if v3 is None:
                    return None
                else:
                    if type(v3) is not int or v3 < -128 or v3 > 127:
                        return None
                    out['inControlledShutdown'] = v3
    if len(data) != len(out):
        return None
    try:
        check_broker_registration_change_record(out)
    except Invalid:
        return None
    return out


def validate_broker_registration_change_record_v2(data):
    try:
        v0 = data['brokerId']
        v1 = data['brokerEpoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -9223372036854775808 or v1 > 9223372036854775807:
        return None
    out = {'brokerId': v0, 'brokerEpoch': v1}
    get = data.get
    left = len(data) - 2
    if left:
        v2 = get('fenced', M)
        if v2 is not M:
            left -= 1
            if v2 is None:
                return None
            else:
                if type(v2) is not int or v2 < -128 or v2 > 127:
                    return None
                out['fenced'] = v2
        if left:
            v3 = get('inControlledShutdown', M)
            if v3 is not M:
                left -= 1
                if v3 is None:
                    return None
                else:
                    if type(v3) is not int or v3 < -128 or v3 > 127:
                        return None
                    out['inControlledShutdown'] = v3
            if left:
                v4 = get('logDirs', M)
                if v4 is not M:
                    left -= 1
                    if v4 is None:
                        return None
                    else:
                        if type(v4) is not list:
                            return None
                        try:
                            known = U.issuperset(v4)
                        except TypeError:
                            return None
                        if not known and not all(is_uuid(i) for i in v4):
                            return None
                        v4 = tuple(v4)
                        out['logDirs'] = v4
    if len(data) != len(out):
        return None
    try:
        check_broker_registration_change_record(out)
    except Invalid:
        return None
    return out


def validate_broker_registration_change_record_v3(data):
    try:
        v0 = data['brokerId']
        v1 = data['brokerEpoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -9223372036854775808 or v1 > 9223372036854775807:
        return None
    out = {'brokerId': v0, 'brokerEpoch': v1}
    get = data.get
    left = len(data) - 2
    if left:
        v2 = get('fenced', M)
        if v2 is not M:
            left -= 1
            if v2 is None:
                return None
            else:
                if type(v2) is not int or v2 < -128 or v2 > 127:
                    return None
                out['fenced'] = v2
        if left:
            v3 = get('inControlledShutdown', M)
            if v3 is not M:
                left -= 1
                if v3 is None:
                    return None
                else:
                    if type(v3) is not int or v3 < -128 or v3 > 127:
                        return None
                    out['inControlledShutdown'] = v3
            if left:
                v4 = get('logDirs', M)
                if v4 is not M:
                    left -= 1
                    if v4 is None:
                        return None
                    else:
                        if type(v4) is not list:
                            return None
                        try:
                            known = U.issuperset(v4)
                        except TypeError:
                            return None
                        if not known and not all(is_uuid(i) for i in v4):
                            return None
                        v4 = tuple(v4)
                        out['logDirs'] = v4
                if left:
                    v5 = get('cordonedLogDirs', M)
                    if v5 is not M:
                        left -= 1
                        if v5 is None:
                            out['cordonedLogDirs'] = None
                        else:
                            if type(v5) is not list:
                                return None
                            try:
                                known = U.issuperset(v5)
                            except TypeError:
                                return None
                            if not known and not all(is_uuid(i) for i in v5):
                                return None
                            v5 = tuple(v5)
                            out['cordonedLogDirs'] = v5
    if len(data) != len(out):
        return None
    try:
        check_broker_registration_change_record(out)
    except Invalid:
        return None
    return out


check_clear_elr_record = _SEMANTICS.get('CLEAR_ELR_RECORD', _no_semantics)


def validate_clear_elr_record_v0(data):
    try:
        v0 = data['topicName']
    except KeyError:
        return None
    if v0 is None:
        return None
    if not isinstance(v0, str):
        return None
    out = {'topicName': v0}
    if len(data) != len(out):
        return None
    try:
        check_clear_elr_record(out)
    except Invalid:
        return None
    return out


check_config_record = _SEMANTICS.get('CONFIG_RECORD', _no_semantics)


def validate_config_record_v0(data):
    try:
        v0 = data['resourceType']
        v1 = data['resourceName']
        v2 = data['name']
        v3 = data['value']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -128 or v0 > 127:
        return None
    if v1 is None:
        return None
    if not isinstance(v1, str):
        return None
    if v2 is None:
        return None
    if not isinstance(v2, str):
        return None
    if v3 is not None:
        if not isinstance(v3, str):
            return None
    out = {'resourceType': v0, 'resourceName': v1, 'name': v2, 'value': v3}
    if len(data) != len(out):
        return None
    try:
        check_config_record(out)
    except Invalid:
        return None
    return out


check_feature_level_record = _SEMANTICS.get('FEATURE_LEVEL_RECORD', _no_semantics)


def validate_feature_level_record_v0(data):
    try:
        v0 = data['name']
        v1 = data['featureLevel']
    except KeyError:
        return None
    if v0 is None:
        return None
    if not isinstance(v0, str):
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -32768 or v1 > 32767:
        return None
    out = {'name': v0, 'featureLevel': v1}
    if len(data) != len(out):
        return None
    try:
        check_feature_level_record(out)
    except Invalid:
        return None
    return out


check_fence_broker_record = _SEMANTICS.get('FENCE_BROKER_RECORD', _no_semantics)


def validate_fence_broker_record_v0(data):
    try:
        v0 = data['id']
        v1 = data['epoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -9223372036854775808 or v1 > 9223372036854775807:
        return None
    out = {'id': v0, 'epoch': v1}
    if len(data) != len(out):
        return None
    try:
        check_fence_broker_record(out)
    except Invalid:
        return None
    return out


check_partition_change_record = _SEMANTICS.get('PARTITION_CHANGE_RECORD', _no_semantics)


def validate_partition_change_record_v0(data):
    try:
        v0 = data['partitionId']
        v1 = data['topicId']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    out = {'partitionId': v0, 'topicId': v1}
    get = data.get
    left = len(data) - 2
    if left:
        v2 = get('isr', M)
        if v2 is not M:
            left -= 1
            if v2 is None:
                out['isr'] = None
            else:
                if type(v2) is not list:
                    return None
                for i in v2:
                    if type(i) is not int or i < 0 or i > 2147483647:
                        return None
                v2 = tuple(v2)
                if len(v2) > 1 and len(set(v2)) != len(v2):
                    return None
                out['isr'] = v2
        if left:
            v3 = get('leader', M)
            if v3 is not M:
                left -= 1
                if v3 is None:
                    return None
                else:
                    if type(v3) is not int or v3 < -2147483648 or v3 > 2147483647:
                        return None
                    out['leader'] = v3
            if left:
                v4 = get('replicas', M)
                if v4 is not M:
                    left -= 1
                    if v4 is None:
                        out['replicas'] = None
                    else:
                        if type(v4) is not list:
                            return None
                        for i in v4:
                            if type(i) is not int or i < 0 or i > 2147483647:
                                return None
                        v4 = tuple(v4)
                        if len(v4) > 1 and len(set(v4)) != len(v4):
                            return None
                        out['replicas'] = v4
                if left:
                    v5 = get('removingReplicas', M)
                    if v5 is not M:
                        left -= 1
                        if v5 is None:
                            out['removingReplicas'] = None
                        else:
                            if type(v5) is not list:
                                return None
                            for i in v5:
                                if type(i) is not int or i < 0 or i > 2147483647:
                                    return None
                            v5 = tuple(v5)
                            if len(v5) > 1 and len(set(v5)) != len(v5):
                                return None
                            out['removingReplicas'] = v5
                    if left:
                        v6 = get('addingReplicas', M)
                        if v6 is not M:
                            left -= 1
                            if v6 is None:
                                out['addingReplicas'] = None
                            else:
                                if type(v6) is not list:
                                    return None
                                for i in v6:
                                    if type(i) is not int or i < 0 or i > 2147483647:
                                        return None
                                v6 = tuple(v6)
                                if len(v6) > 1 and len(set(v6)) != len(v6):
                                    return None
                                out['addingReplicas'] = v6
                        if left:
                            v7 = get('leaderRecoveryState', M)
                            if v7 is not M:
                                left -= 1
                                if v7 is None:
                                    return None
                                else:
                                    if type(v7) is not int or v7 < -128 or v7 > 127:
                                        return None
                                    out['leaderRecoveryState'] = v7
    if len(data) != len(out):
        return None
    try:
        check_partition_change_record(out)
    except Invalid:
        return None
    return out


def validate_partition_change_record_v1(data):
    try:
        v0 = data['partitionId']
        v1 = data['topicId']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    out = {'partitionId': v0, 'topicId': v1}
    get = data.get
    left = len(data) - 2
    if left:
        v2 = get('isr', M)
        if v2 is not M:
            left -= 1
            if v2 is None:
                out['isr'] = None
            else:
                if type(v2) is not list:
                    return None
                for i in v2:
                    if type(i) is not int or i < 0 or i > 2147483647:
                        return None
                v2 = tuple(v2)
                if len(v2) > 1 and len(set(v2)) != len(v2):
                    return None
                out['isr'] = v2
        if left:
            v3 = get('leader', M)
            if v3 is not M:
                left -= 1
                if v3 is None:
                    return None
                else:
                    if type(v3) is not int or v3 < -2147483648 or v3 > 2147483647:
                        return None
                    out['leader'] = v3
            if left:
                v4 = get('replicas', M)
                if v4 is not M:
                    left -= 1
                    if v4 is None:
                        out['replicas'] = None
                    else:
                        if type(v4) is not list:
                            return None
                        for i in v4:
                            if type(i) is not int or i < 0 or i > 2147483647:
                                return None
                        v4 = tuple(v4)
                        if len(v4) > 1 and len(set(v4)) != len(v4):
                            return None
                        out['replicas'] = v4
                if left:
                    v5 = get('removingReplicas', M)
                    if v5 is not M:
                        left -= 1
                        if v5 is None:
                            out['removingReplicas'] = None
                        else:
                            if type(v5) is not list:
                                return None
                            for i in v5:
                                if type(i) is not int or i < 0 or i > 2147483647:
                                    return None
                            v5 = tuple(v5)
                            if len(v5) > 1 and len(set(v5)) != len(v5):
                                return None
                            out['removingReplicas'] = v5
                    if left:
                        v6 = get('addingReplicas', M)
                        if v6 is not M:
                            left -= 1
                            if v6 is None:
                                out['addingReplicas'] = None
                            else:
                                if type(v6) is not list:
                                    return None
                                for i in v6:
                                    if type(i) is not int or i < 0 or i > 2147483647:
                                        return None
                                v6 = tuple(v6)
                                if len(v6) > 1 and len(set(v6)) != len(v6):
                                    return None
                                out['addingReplicas'] = v6
                        if left:
                            v7 = get('leaderRecoveryState', M)
                            if v7 is not M:
                                left -= 1
                                if v7 is None:
                                    return None
                                else:
                                    if type(v7) is not int or v7 < -128 or v7 > 127:
                                        return None
                                    out['leaderRecoveryState'] = v7
                            if left:
                                v8 = get('directories', M)
                                if v8 is not M:
                                    left -= 1
                                    if v8 is None:
                                        out['directories'] = None
                                    else:
                                        if type(v8) is not list:
                                            return None
                                        try:
                                            known = U.issuperset(v8)
                                        except TypeError:
                                            return None
                                        if not known and not all(is_uuid(i) for i in v8):
                                            return None
                                        v8 = tuple(v8)
                                        out['directories'] = v8
    if len(data) != len(out):
        return None
    try:
        check_partition_change_record(out)
    except Invalid:
        return None
    return out


def validate_partition_change_record_v2(data):
    try:
        v0 = data['partitionId']
        v1 = data['topicId']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    out = {'partitionId': v0, 'topicId': v1}
    get = data.get
    left = len(data) - 2
    if left:
        v2 = get('isr', M)
        if v2 is not M:
            left -= 1
            if v2 is None:
                out['isr'] = None
            else:
                if type(v2) is not list:
                    return None
                for i in v2:
                    if type(i) is not int or i < 0 or i > 2147483647:
                        return None
                v2 = tuple(v2)
                if len(v2) > 1 and len(set(v2)) != len(v2):
                    return None
                out['isr'] = v2
        if left:
            v3 = get('leader', M)
            if v3 is not M:
                left -= 1
                if v3 is None:
                    return None
                else:
                    if type(v3) is not int or v3 < -2147483648 or v3 > 2147483647:
                        return None
                    out['leader'] = v3
            if left:
                v4 = get('replicas', M)
                if v4 is not M:
                    left -= 1
                    if v4 is None:
                        out['replicas'] = None
                    else:
                        if type(v4) is not list:
                            return None
                        for i in v4:
                            if type(i) is not int or i < 0 or i > 2147483647:
                                return None
                        v4 = tuple(v4)
                        if len(v4) > 1 and len(set(v4)) != len(v4):
                            return None
                        out['replicas'] = v4
                if left:
                    v5 = get('removingReplicas', M)
                    if v5 is not M:
                        left -= 1
                        if v5 is None:
                            out['removingReplicas'] = None
                        else:
                            if type(v5) is not list:
                                return None
                            for i in v5:
                                if type(i) is not int or i < 0 or i > 2147483647:
                                    return None
                            v5 = tuple(v5)
                            if len(v5) > 1 and len(set(v5)) != len(v5):
                                return None
                            out['removingReplicas'] = v5
                    if left:
                        v6 = get('addingReplicas', M)
                        if v6 is not M:
                            left -= 1
                            if v6 is None:
                                out['addingReplicas'] = None
                            else:
                                if type(v6) is not list:
                                    return None
                                for i in v6:
                                    if type(i) is not int or i < 0 or i > 2147483647:
                                        return None
                                v6 = tuple(v6)
                                if len(v6) > 1 and len(set(v6)) != len(v6):
                                    return None
                                out['addingReplicas'] = v6
                        if left:
                            v7 = get('leaderRecoveryState', M)
                            if v7 is not M:
                                left -= 1
                                if v7 is None:
                                    return None
                                else:
                                    if type(v7) is not int or v7 < -128 or v7 > 127:
                                        return None
                                    out['leaderRecoveryState'] = v7
                            if left:
                                v8 = get('directories', M)
                                if v8 is not M:
                                    left -= 1
                                    if v8 is None:
                                        out['directories'] = None
                                    else:
                                        if type(v8) is not list:
                                            return None
                                        try:
                                            known = U.issuperset(v8)
                                        except TypeError:
                                            return None
                                        if not known and not all(is_uuid(i) for i in v8):
                                            return None
                                        v8 = tuple(v8)
                                        out['directories'] = v8
                                if left:
                                    v9 = get('eligibleLeaderReplicas', M)
                                    if v9 is not M:
                                        left -= 1
                                        if v9 is None:
                                            out['eligibleLeaderReplicas'] = None
                                        else:
                                            if type(v9) is not list:
                                                return None
                                            for i in v9:
                                                if type(i) is not int or i < 0 or i > 2147483647:
                                                    return None
                                            v9 = tuple(v9)
                                            if len(v9) > 1 and len(set(v9)) != len(v9):
                                                return None
                                            out['eligibleLeaderReplicas'] = v9
                                    if left:
                                        v10 = get('lastKnownElr', M)
                                        if v10 is not M:
                                            left -= 1
                                            if v10 is None:
                                                out['lastKnownElr'] = None
                                            else:
                                                if type(v10) is not list:
                                                    return None
                                                for i in v10:
                                                    if type(i) is not int or i < 0 or i > 2147483647:
                                                        return None
                                                v10 = tuple(v10)
                                                if len(v10) > 1 and len(set(v10)) != len(v10):
                                                    return None
                                                out['lastKnownElr'] = v10
    if len(data) != len(out):
        return None
    try:
        check_partition_change_record(out)
    except Invalid:
        return None
    return out


check_partition_record = _SEMANTICS.get('PARTITION_RECORD', _no_semantics)


def validate_partition_record_v0(data):
    try:
        v0 = data['partitionId']
        v1 = data['topicId']
        v2 = data['replicas']
        v3 = data['isr']
        v4 = data['removingReplicas']
        v5 = data['addingReplicas']
        v6 = data['leader']
        v8 = data['leaderEpoch']
        v9 = data['partitionEpoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    if v2 is None:
        return None
    if type(v2) is not list:
        return None
    for i in v2:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v2 = tuple(v2)
    if len(v2) > 1 and len(set(v2)) != len(v2):
        return None
    if v3 is None:
        return None
    if type(v3) is not list:
        return None
    for i in v3:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v3 = tuple(v3)
    if len(v3) > 1 and len(set(v3)) != len(v3):
        return None
    if v4 is None:
        return None
    if type(v4) is not list:
        return None
    for i in v4:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v4 = tuple(v4)
    if len(v4) > 1 and len(set(v4)) != len(v4):
        return None
    if v5 is None:
        return None
    if type(v5) is not list:
        return None
    for i in v5:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v5 = tuple(v5)
    if len(v5) > 1 and len(set(v5)) != len(v5):
        return None
    if v6 is None:
        return None
    if type(v6) is not int or v6 < -2147483648 or v6 > 2147483647:
        return None
    if v8 is None:
        return None
    if type(v8) is not int or v8 < -2147483648 or v8 > 2147483647:
        return None
    if v9 is None:
        return None
    if type(v9) is not int or v9 < -2147483648 or v9 > 2147483647:
        return None
    out = {'partitionId': v0, 'topicId': v1, 'replicas': v2, 'isr': v3, 'removingReplicas': v4, 'addingReplicas': v5, 'leader': v6, 'leaderEpoch': v8, 'partitionEpoch': v9}
    get = data.get
    left = len(data) - 9
    if left:
        v7 = get('leaderRecoveryState', M)
        if v7 is not M:
            left -= 1
            if v7 is None:
                return None
            else:
                if type(v7) is not int or v7 < -128 or v7 > 127:
                    return None
                out['leaderRecoveryState'] = v7
    if len(data) != len(out):
        return None
    try:
        check_partition_record(out)
    except Invalid:
        return None
    return out


def validate_partition_record_v1(data):
    try:
        v0 = data['partitionId']
        v1 = data['topicId']
        v2 = data['replicas']
        v3 = data['isr']
        v4 = data['removingReplicas']
        v5 = data['addingReplicas']
        v6 = data['leader']
        v8 = data['leaderEpoch']
        v9 = data['partitionEpoch']
        v10 = data['directories']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    if v2 is None:
        return None
    if type(v2) is not list:
        return None
    for i in v2:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v2 = tuple(v2)
    if len(v2) > 1 and len(set(v2)) != len(v2):
        return None
    if v3 is None:
        return None
    if type(v3) is not list:
        return None
    for i in v3:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v3 = tuple(v3)
    if len(v3) > 1 and len(set(v3)) != len(v3):
        return None
    if v4 is None:
        return None
    if type(v4) is not list:
        return None
    for i in v4:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v4 = tuple(v4)
    if len(v4) > 1 and len(set(v4)) != len(v4):
        return None
    if v5 is None:
        return None
    if type(v5) is not list:
        return None
    for i in v5:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v5 = tuple(v5)
    if len(v5) > 1 and len(set(v5)) != len(v5):
        return None
    if v6 is None:
        return None
    if type(v6) is not int or v6 < -2147483648 or v6 > 2147483647:
        return None
    if v8 is None:
        return None
    if type(v8) is not int or v8 < -2147483648 or v8 > 2147483647:
        return None
    if v9 is None:
        return None
    if type(v9) is not int or v9 < -2147483648 or v9 > 2147483647:
        return None
    if v10 is None:
        return None
    if type(v10) is not list:
        return None
    try:
        known = U.issuperset(v10)
    except TypeError:
        return None
    if not known and not all(is_uuid(i) for i in v10):
        return None
    v10 = tuple(v10)
    out = {'partitionId': v0, 'topicId': v1, 'replicas': v2, 'isr': v3, 'removingReplicas': v4, 'addingReplicas': v5, 'leader': v6, 'leaderEpoch': v8, 'partitionEpoch': v9, 'directories': v10}
    get = data.get
    left = len(data) - 10
    if left:
        v7 = get('leaderRecoveryState', M)
        if v7 is not M:
            left -= 1
            if v7 is None:
                return None
            else:
                if type(v7) is not int or v7 < -128 or v7 > 127:
                    return None
                out['leaderRecoveryState'] = v7
    if len(data) != len(out):
        return None
    try:
        check_partition_record(out)
    except Invalid:
        return None
    return out


def validate_partition_record_v2(data):
    try:
        v0 = data['partitionId']
        v1 = data['topicId']
        v2 = data['replicas']
        v3 = data['isr']
        v4 = data['removingReplicas']
        v5 = data['addingReplicas']
        v6 = data['leader']
        v8 = data['leaderEpoch']
        v9 = data['partitionEpoch']
        v10 = data['directories']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    if v2 is None:
        return None
    if type(v2) is not list:
        return None
    for i in v2:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v2 = tuple(v2)
    if len(v2) > 1 and len(set(v2)) != len(v2):
        return None
    if v3 is None:
        return None
    if type(v3) is not list:
        return None
    for i in v3:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v3 = tuple(v3)
    if len(v3) > 1 and len(set(v3)) != len(v3):
        return None
    if v4 is None:
        return None
    if type(v4) is not list:
        return None
    for i in v4:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v4 = tuple(v4)
    if len(v4) > 1 and len(set(v4)) != len(v4):
        return None
    if v5 is None:
        return None
    if type(v5) is not list:
        return None
    for i in v5:
        if type(i) is not int or i < 0 or i > 2147483647:
            return None
    v5 = tuple(v5)
    if len(v5) > 1 and len(set(v5)) != len(v5):
        return None
    if v6 is None:
        return None
    if type(v6) is not int or v6 < -2147483648 or v6 > 2147483647:
        return None
    if v8 is None:
        return None
    if type(v8) is not int or v8 < -2147483648 or v8 > 2147483647:
        return None
    if v9 is None:
        return None
    if type(v9) is not int or v9 < -2147483648 or v9 > 2147483647:
        return None
    if v10 is None:
        return None
    if type(v10) is not list:
        return None
    try:
        known = U.issuperset(v10)
    except TypeError:
        return None
    if not known and not all(is_uuid(i) for i in v10):
        return None
    v10 = tuple(v10)
    out = {'partitionId': v0, 'topicId': v1, 'replicas': v2, 'isr': v3, 'removingReplicas': v4, 'addingReplicas': v5, 'leader': v6, 'leaderEpoch': v8, 'partitionEpoch': v9, 'directories': v10}
    get = data.get
    left = len(data) - 10
    if left:
        v7 = get('leaderRecoveryState', M)
        if v7 is not M:
            left -= 1
            if v7 is None:
                return None
            else:
                if type(v7) is not int or v7 < -128 or v7 > 127:
                    return None
                out['leaderRecoveryState'] = v7
        if left:
            v11 = get('eligibleLeaderReplicas', M)
            if v11 is not M:
                left -= 1
                if v11 is None:
                    out['eligibleLeaderReplicas'] = None
                else:
                    if type(v11) is not list:
                        return None
                    for i in v11:
                        if type(i) is not int or i < 0 or i > 2147483647:
                            return None
                    v11 = tuple(v11)
                    if len(v11) > 1 and len(set(v11)) != len(v11):
                        return None
                    out['eligibleLeaderReplicas'] = v11
            if left:
                v12 = get('lastKnownElr', M)
                if v12 is not M:
                    left -= 1
                    if v12 is None:
                        out['lastKnownElr'] = None
                    else:
                        if type(v12) is not list:
                            return None
                        for i in v12:
                            if type(i) is not int or i < 0 or i > 2147483647:
                                return None
                        v12 = tuple(v12)
                        if len(v12) > 1 and len(set(v12)) != len(v12):
                            return None
                        out['lastKnownElr'] = v12
    if len(data) != len(out):
        return None
    try:
        check_partition_record(out)
    except Invalid:
        return None
    return out


check_register_broker_record = _SEMANTICS.get('REGISTER_BROKER_RECORD', _no_semantics)


def validate_register_broker_record_v0(data):
    try:
        v0 = data['brokerId']
        v1 = data['incarnationId']
        v2 = data['brokerEpoch']
        v3 = data['endPoints']
        v4 = data['features']
        v5 = data['rack']
        v6 = data['fenced']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    if v2 is None:
        return None
    if type(v2) is not int or v2 < -9223372036854775808 or v2 > 9223372036854775807:
        return None
    if v3 is None:
        return None
    if type(v3) is not list or not all(isinstance(i, dict) for i in v3):
        return None
    if v4 is None:
        return None
    if type(v4) is not list or not all(isinstance(i, dict) for i in v4):
        return None
    if v5 is not None:
        if not isinstance(v5, str):
            return None
    if v6 is None:
        return None
    if type(v6) is not bool:
        return None
    out = {'brokerId': v0, 'incarnationId': v1, 'brokerEpoch': v2, 'endPoints': v3, 'features': v4, 'rack': v5, 'fenced': v6}
    if len(data) != len(out):
        return None
    try:
        check_register_broker_record(out)
    except Invalid:
        return None
    return out


def validate_register_broker_record_v1(data):
    try:
        v0 = data['brokerId']
        v1 = data['incarnationId']
        v2 = data['brokerEpoch']
        v3 = data['endPoints']
        v4 = data['features']
        v5 = data['rack']
        v6 = data['fenced']
        v7 = data['inControlledShutdown']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    if v2 is None:
        return None
    if type(v2) is not int or v2 < -9223372036854775808 or v2 > 9223372036854775807:
        return None
    if v3 is None:
        return None
    if type(v3) is not list or not all(isinstance(i, dict) for i in v3):
        return None
    if v4 is None:
        return None
    if type(v4) is not list or not all(isinstance(i, dict) for i in v4):
        return None
    if v5 is not None:
        if not isinstance(v5, str):
            return None
    if v6 is None:
        return None
    if type(v6) is not bool:
        return None
    if v7 is None:
        return None
    if type(v7) is not bool:
        return None
    out = {'brokerId': v0, 'incarnationId': v1, 'brokerEpoch': v2, 'endPoints': v3, 'features': v4, 'rack': v5, 'fenced': v6, 'inControlledShutdown': v7}
    if len(data) != len(out):
        return None
    try:
        check_register_broker_record(out)
    except Invalid:
        return None
    return out


def validate_register_broker_record_v2(data):
    try:
        v0 = data['brokerId']
        v1 = data['isMigratingZkBroker']
        v2 = data['incarnationId']
        v3 = data['brokerEpoch']
        v4 = data['endPoints']
        v5 = data['features']
        v6 = data['rack']
        v7 = data['fenced']
        v8 = data['inControlledShutdown']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not bool:
        return None
    if v2 is None:
        return None
    if type(v2) is not str or (v2 not in U and not is_uuid(v2)):
        return None
    if v3 is None:
        return None
    if type(v3) is not int or v3 < -9223372036854775808 or v3 > 9223372036854775807:
        return None
    if v4 is None:
        return None
    if type(v4) is not list or not all(isinstance(i, dict) for i in v4):
        return None
    if v5 is None:
        return None
    if type(v5) is not list or not all(isinstance(i, dict) for i in v5):
        return None
    if v6 is not None:
        if not isinstance(v6, str):
            return None
    if v7 is None:
        return None
    if type(v7) is not bool:
        return None
    if v8 is None:
        return None
    if type(v8) is not bool:
        return None
    out = {'brokerId': v0, 'isMigratingZkBroker': v1, 'incarnationId': v2, 'brokerEpoch': v3, 'endPoints': v4, 'features': v5, 'rack': v6, 'fenced': v7, 'inControlledShutdown': v8}
    if len(data) != len(out):
        return None
    try:
        check_register_broker_record(out)
    except Invalid:
        return None
    return out


def validate_register_broker_record_v3(data):
    try:
        v0 = data['brokerId']
        v1 = data['isMigratingZkBroker']
        v2 = data['incarnationId']
        v3 = data['brokerEpoch']
        v4 = data['endPoints']
        v5 = data['features']
        v6 = data['rack']
        v7 = data['fenced']
        v8 = data['inControlledShutdown']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not bool:
        return None
    if v2 is None:
        return None
    if type(v2) is not str or (v2 not in U and not is_uuid(v2)):
        return None
    if v3 is None:
        return None
    if type(v3) is not int or v3 < -9223372036854775808 or v3 > 9223372036854775807:
        return None
    if v4 is None:
        return None
    if type(v4) is not list or not all(isinstance(i, dict) for i in v4):
        return None
    if v5 is None:
        return None
    if type(v5) is not list or not all(isinstance(i, dict) for i in v5):
        return None
    if v6 is not None:
        if not isinstance(v6, str):
            return None
    if v7 is None:
        return None
    if type(v7) is not bool:
        return None
    if v8 is None:
        return None
    if type(v8) is not bool:
        return None
    out = {'brokerId': v0, 'isMigratingZkBroker': v1, 'incarnationId': v2, 'brokerEpoch': v3, 'endPoints': v4, 'features': v5, 'rack': v6, 'fenced': v7, 'inControlledShutdown': v8}
    get = data.get
    left = len(data) - 9
    if left:
        v9 = get('logDirs', M)
        if v9 is not M:
            left -= 1
            if v9 is None:
                return None
            else:
                if type(v9) is not list:
                    return None
                try:
                    known = U.issuperset(v9)
                except TypeError:
                    return None
                if not known and not all(is_uuid(i) for i in v9):
                    return None
                v9 = tuple(v9)
                out['logDirs'] = v9
    if len(data) != len(out):
        return None
    try:
        check_register_broker_record(out)
    except Invalid:
        return None
    return out


def validate_register_broker_record_v4(data):
    try:
        v0 = data['brokerId']
        v1 = data['isMigratingZkBroker']
        v2 = data['incarnationId']
        v3 = data['brokerEpoch']
        v4 = data['endPoints']
        v5 = data['features']
        v6 = data['rack']
        v7 = data['fenced']
        v8 = data['inControlledShutdown']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not bool:
        return None
    if v2 is None:
        return None
    if type(v2) is not str or (v2 not in U and not is_uuid(v2)):
        return None
    if v3 is None:
        return None
    if type(v3) is not int or v3 < -9223372036854775808 or v3 > 9223372036854775807:
        return None
    if v4 is None:
        return None
    if type(v4) is not list or not all(isinstance(i, dict) for i in v4):
        return None
    if v5 is None:
        return None
    if type(v5) is not list or not all(isinstance(i, dict) for i in v5):
        return None
    if v6 is not None:
        if not isinstance(v6, str):
            return None
    if v7 is None:
        return None
    if type(v7) is not bool:
        return None
    if v8 is None:
        return None
    if type(v8) is not bool:
        return None
    out = {'brokerId': v0, 'isMigratingZkBroker': v1, 'incarnationId': v2, 'brokerEpoch': v3, 'endPoints': v4, 'features': v5, 'rack': v6, 'fenced': v7, 'inControlledShutdown': v8}
    get = data.get
    left = len(data) - 9
    if left:
        v9 = get('logDirs', M)
        if v9 is not M:
            left -= 1
            if v9 is None:
                return None
            else:
                if type(v9) is not list:
                    return None
                try:
                    known = U.issuperset(v9)
                except TypeError:
                    return None
                if not known and not all(is_uuid(i) for i in v9):
                    return None
                v9 = tuple(v9)
                out['logDirs'] = v9
        if left:
            v10 = get('cordonedLogDirs', M)
            if v10 is not M:
                left -= 1
                if v10 is None:
                    out['cordonedLogDirs'] = None
                else:
                    if type(v10) is not list:
                        return None
                    try:
                        known = U.issuperset(v10)
                    except TypeError:
                        return None
                    if not known and not all(is_uuid(i) for i in v10):
                        return None
                    v10 = tuple(v10)
                    out['cordonedLogDirs'] = v10
    if len(data) != len(out):
        return None
    try:
        check_register_broker_record(out)
    except Invalid:
        return None
    return out


check_remove_topic_record = _SEMANTICS.get('REMOVE_TOPIC_RECORD', _no_semantics)


def validate_remove_topic_record_v0(data):
    try:
        v0 = data['topicId']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not str or (v0 not in U and not is_uuid(v0)):
        return None
    out = {'topicId': v0}
    if len(data) != len(out):
        return None
    try:
        check_remove_topic_record(out)
    except Invalid:
        return None
    return out


check_replica_log_info_record = _SEMANTICS.get('REPLICA_LOG_INFO_RECORD', _no_semantics)


def validate_replica_log_info_record_v0(data):
    try:
        v0 = data['topicId']
        v1 = data['partitionId']
        v2 = data['brokerId']
        v3 = data['brokerEpoch']
        v4 = data['logEndOffset']
        v5 = data['lastWrittenLeaderEpoch']
        v6 = data['currentLeaderEpoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not str or (v0 not in U and not is_uuid(v0)):
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -2147483648 or v1 > 2147483647:
        return None
    if v2 is None:
        return None
    if type(v2) is not int or v2 < -2147483648 or v2 > 2147483647:
        return None
    if v3 is None:
        return None
    if type(v3) is not int or v3 < -9223372036854775808 or v3 > 9223372036854775807:
        return None
    if v4 is None:
        return None
    if type(v4) is not int or v4 < -9223372036854775808 or v4 > 9223372036854775807:
        return None
    if v5 is None:
        return None
    if type(v5) is not int or v5 < -2147483648 or v5 > 2147483647:
        return None
    if v6 is None:
        return None
    if type(v6) is not int or v6 < -2147483648 or v6 > 2147483647:
        return None
    out = {'topicId': v0, 'partitionId': v1, 'brokerId': v2, 'brokerEpoch': v3, 'logEndOffset': v4, 'lastWrittenLeaderEpoch': v5, 'currentLeaderEpoch': v6}
    if len(data) != len(out):
        return None
    try:
        check_replica_log_info_record(out)
    except Invalid:
        return None
    return out


check_topic_record = _SEMANTICS.get('TOPIC_RECORD', _no_semantics)


def validate_topic_record_v0(data):
    try:
        v0 = data['name']
        v1 = data['topicId']
    except KeyError:
        return None
    if v0 is None:
        return None
    if not isinstance(v0, str):
        return None
    if v1 is None:
        return None
    if type(v1) is not str or (v1 not in U and not is_uuid(v1)):
        return None
    out = {'name': v0, 'topicId': v1}
    if len(data) != len(out):
        return None
    try:
        check_topic_record(out)
    except Invalid:
        return None
    return out


check_unfence_broker_record = _SEMANTICS.get('UNFENCE_BROKER_RECORD', _no_semantics)


def validate_unfence_broker_record_v0(data):
    try:
        v0 = data['id']
        v1 = data['epoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -9223372036854775808 or v1 > 9223372036854775807:
        return None
    out = {'id': v0, 'epoch': v1}
    if len(data) != len(out):
        return None
    try:
        check_unfence_broker_record(out)
    except Invalid:
        return None
    return out


check_unregister_broker_record = _SEMANTICS.get('UNREGISTER_BROKER_RECORD', _no_semantics)


def validate_unregister_broker_record_v0(data):
    try:
        v0 = data['brokerId']
        v1 = data['brokerEpoch']
    except KeyError:
        return None
    if v0 is None:
        return None
    if type(v0) is not int or v0 < -2147483648 or v0 > 2147483647:
        return None
    if v1 is None:
        return None
    if type(v1) is not int or v1 < -9223372036854775808 or v1 > 9223372036854775807:
        return None
    out = {'brokerId': v0, 'brokerEpoch': v1}
    if len(data) != len(out):
        return None
    try:
        check_unregister_broker_record(out)
    except Invalid:
        return None
    return out


VALIDATORS = {
    ('BROKER_REGISTRATION_CHANGE_RECORD', 0): validate_broker_registration_change_record_v0,
    ('BROKER_REGISTRATION_CHANGE_RECORD', 1): validate_broker_registration_change_record_v1,
    ('BROKER_REGISTRATION_CHANGE_RECORD', 2): validate_broker_registration_change_record_v2,
    ('BROKER_REGISTRATION_CHANGE_RECORD', 3): validate_broker_registration_change_record_v3,
    ('CLEAR_ELR_RECORD', 0): validate_clear_elr_record_v0,
    ('CONFIG_RECORD', 0): validate_config_record_v0,
    ('FEATURE_LEVEL_RECORD', 0): validate_feature_level_record_v0,
    ('FENCE_BROKER_RECORD', 0): validate_fence_broker_record_v0,
    ('PARTITION_CHANGE_RECORD', 0): validate_partition_change_record_v0,
    ('PARTITION_CHANGE_RECORD', 1): validate_partition_change_record_v1,
    ('PARTITION_CHANGE_RECORD', 2): validate_partition_change_record_v2,
    ('PARTITION_RECORD', 0): validate_partition_record_v0,
    ('PARTITION_RECORD', 1): validate_partition_record_v1,
    ('PARTITION_RECORD', 2): validate_partition_record_v2,
    ('REGISTER_BROKER_RECORD', 0): validate_register_broker_record_v0,
    ('REGISTER_BROKER_RECORD', 1): validate_register_broker_record_v1,
    ('REGISTER_BROKER_RECORD', 2): validate_register_broker_record_v2,
    ('REGISTER_BROKER_RECORD', 3): validate_register_broker_record_v3,
    ('REGISTER_BROKER_RECORD', 4): validate_register_broker_record_v4,
    ('REMOVE_TOPIC_RECORD', 0): validate_remove_topic_record_v0,
    ('REPLICA_LOG_INFO_RECORD', 0): validate_replica_log_info_record_v0,
    ('TOPIC_RECORD', 0): validate_topic_record_v0,
    ('UNFENCE_BROKER_RECORD', 0): validate_unfence_broker_record_v0,
    ('UNREGISTER_BROKER_RECORD', 0): validate_unregister_broker_record_v0,
}

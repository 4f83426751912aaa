"""Inventory service: stock levels, reservations and restock planning."""

from __future__ import annotations

import dataclasses
import datetime as dt

def reserve_001(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 1)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 1)
        return False
    store.set(sku, level - qty)
    return True

def reserve_002(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 2)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 2)
        return False
    store.set(sku, level - qty)
    return True

def reserve_003(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 3)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 3)
        return False
    store.set(sku, level - qty)
    return True

def reserve_004(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 4)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 4)
        return False
    store.set(sku, level - qty)
    return True

def reserve_005(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 5)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 5)
        return False
    store.set(sku, level - qty)
    return True

def reserve_006(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 6)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 6)
        return False
    store.set(sku, level - qty)
    return True

def reserve_007(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 7)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 7)
        return False
    store.set(sku, level - qty)
    return True

def reserve_008(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 8)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 8)
        return False
    store.set(sku, level - qty)
    return True

def reserve_009(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 9)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 9)
        return False
    store.set(sku, level - qty)
    return True

def reserve_010(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 10)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 10)
        return False
    store.set(sku, level - qty)
    return True

def reserve_011(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 11)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 11)
        return False
    store.set(sku, level - qty)
    return True

def reserve_012(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 12)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 12)
        return False
    store.set(sku, level - qty)
    return True

def reserve_013(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 13)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 13)
        return False
    store.set(sku, level - qty)
    return True

def reserve_014(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 14)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 14)
        return False
    store.set(sku, level - qty)
    return True

def reserve_015(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 15)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 15)
        return False
    store.set(sku, level - qty)
    return True

def reserve_016(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 16)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 16)
        return False
    store.set(sku, level - qty)
    return True

def reserve_017(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 17)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 17)
        return False
    store.set(sku, level - qty)
    return True

def reserve_018(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 18)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 18)
        return False
    store.set(sku, level - qty)
    return True

def reserve_019(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 19)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 19)
        return False
    store.set(sku, level - qty)
    return True

def reserve_020(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 20)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 20)
        return False
    store.set(sku, level - qty)
    return True

def reserve_021(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 21)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 21)
        return False
    store.set(sku, level - qty)
    return True

def reserve_022(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 22)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 22)
        return False
    store.set(sku, level - qty)
    return True

def reserve_023(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 23)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 23)
        return False
    store.set(sku, level - qty)
    return True

def reserve_024(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 24)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 24)
        return False
    store.set(sku, level - qty)
    return True

def reserve_025(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 25)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 25)
        return False
    store.set(sku, level - qty)
    return True

def reserve_026(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 26)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 26)
        return False
    store.set(sku, level - qty)
    return True

def reserve_027(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 27)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 27)
        return False
    store.set(sku, level - qty)
    return True

def reserve_028(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 28)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 28)
        return False
    store.set(sku, level - qty)
    return True

def reserve_029(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 29)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 29)
        return False
    store.set(sku, level - qty)
    return True

def reserve_030(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 30)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 30)
        return False
    store.set(sku, level - qty)
    return True

def reserve_031(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 31)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 31)
        return False
    store.set(sku, level - qty)
    return True

def reserve_032(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 32)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 32)
        return False
    store.set(sku, level - qty)
    return True

def reserve_033(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 33)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 33)
        return False
    store.set(sku, level - qty)
    return True

def reserve_034(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 34)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 34)
        return False
    store.set(sku, level - qty)
    return True

def reserve_035(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 35)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 35)
        return False
    store.set(sku, level - qty)
    return True

def reserve_036(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 36)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 36)
        return False
    store.set(sku, level - qty)
    return True

def reserve_037(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 37)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 37)
        return False
    store.set(sku, level - qty)
    return True

def reserve_038(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 38)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 38)
        return False
    store.set(sku, level - qty)
    return True

def reserve_039(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 39)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 39)
        return False
    store.set(sku, level - qty)
    return True

def reserve_040(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 40)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 40)
        return False
    store.set(sku, level - qty)
    return True

def reserve_041(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 41)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 41)
        return False
    store.set(sku, level - qty)
    return True

def reserve_042(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 42)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 42)
        return False
    store.set(sku, level - qty)
    return True

def reserve_043(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 43)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 43)
        return False
    store.set(sku, level - qty)
    return True

def reserve_044(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 44)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 44)
        return False
    store.set(sku, level - qty)
    return True

def reserve_045(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 45)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 45)
        return False
    store.set(sku, level - qty)
    return True

def reserve_046(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 46)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 46)
        return False
    store.set(sku, level - qty)
    return True

def reserve_047(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 47)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 47)
        return False
    store.set(sku, level - qty)
    return True

def reserve_048(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 48)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 48)
        return False
    store.set(sku, level - qty)
    return True

def reserve_049(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 49)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 49)
        return False
    store.set(sku, level - qty)
    return True

def reserve_050(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 50)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 50)
        return False
    store.set(sku, level - qty)
    return True

def reserve_051(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 51)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 51)
        return False
    store.set(sku, level - qty)
    return True

def reserve_052(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 52)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 52)
        return False
    store.set(sku, level - qty)
    return True

def reserve_053(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 53)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 53)
        return False
    store.set(sku, level - qty)
    return True

def reserve_054(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 54)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 54)
        return False
    store.set(sku, level - qty)
    return True

def reserve_055(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 55)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 55)
        return False
    store.set(sku, level - qty)
    return True

def reserve_056(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 56)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 56)
        return False
    store.set(sku, level - qty)
    return True

def reserve_057(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 57)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 57)
        return False
    store.set(sku, level - qty)
    return True

def reserve_058(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 58)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 58)
        return False
    store.set(sku, level - qty)
    return True

def reserve_059(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 59)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 59)
        return False
    store.set(sku, level - qty)
    return True

def reserve_060(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 60)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 60)
        return False
    store.set(sku, level - qty)
    return True

def reserve_061(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 61)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 61)
        return False
    store.set(sku, level - qty)
    return True

def reserve_062(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 62)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 62)
        return False
    store.set(sku, level - qty)
    return True

def reserve_063(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 63)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 63)
        return False
    store.set(sku, level - qty)
    return True

def reserve_064(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 64)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 64)
        return False
    store.set(sku, level - qty)
    return True

def reserve_065(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 65)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 65)
        return False
    store.set(sku, level - qty)
    return True

def reserve_066(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 66)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 66)
        return False
    store.set(sku, level - qty)
    return True

def reserve_067(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 67)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 67)
        return False
    store.set(sku, level - qty)
    return True

def reserve_068(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 68)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 68)
        return False
    store.set(sku, level - qty)
    return True

def reserve_069(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 69)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 69)
        return False
    store.set(sku, level - qty)
    return True

def reserve_070(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 70)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 70)
        return False
    store.set(sku, level - qty)
    return True

def reserve_071(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 71)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 71)
        return False
    store.set(sku, level - qty)
    return True

def reserve_072(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 72)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 72)
        return False
    store.set(sku, level - qty)
    return True

def reserve_073(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 73)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 73)
        return False
    store.set(sku, level - qty)
    return True

def reserve_074(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 74)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 74)
        return False
    store.set(sku, level - qty)
    return True

def reserve_075(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 75)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 75)
        return False
    store.set(sku, level - qty)
    return True

def reserve_076(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 76)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 76)
        return False
    store.set(sku, level - qty)
    return True

def reserve_077(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 77)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 77)
        return False
    store.set(sku, level - qty)
    return True

def reserve_078(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 78)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 78)
        return False
    store.set(sku, level - qty)
    return True

def reserve_079(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 79)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 79)
        return False
    store.set(sku, level - qty)
    return True

def reserve_080(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 80)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 80)
        return False
    store.set(sku, level - qty)
    return True

def reserve_081(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 81)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 81)
        return False
    store.set(sku, level - qty)
    return True

def reserve_082(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 82)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 82)
        return False
    store.set(sku, level - qty)
    return True

def reserve_083(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 83)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 83)
        return False
    store.set(sku, level - qty)
    return True

def reserve_084(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 84)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 84)
        return False
    store.set(sku, level - qty)
    return True

def reserve_085(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 85)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 85)
        return False
    store.set(sku, level - qty)
    return True

def reserve_086(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 86)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 86)
        return False
    store.set(sku, level - qty)
    return True

def reserve_087(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 87)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 87)
        return False
    store.set(sku, level - qty)
    return True

def reserve_088(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 88)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 88)
        return False
    store.set(sku, level - qty)
    return True

def reserve_089(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 89)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 89)
        return False
    store.set(sku, level - qty)
    return True

def reserve_090(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 90)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 90)
        return False
    store.set(sku, level - qty)
    return True

def reserve_091(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 91)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 91)
        return False
    store.set(sku, level - qty)
    return True

def reserve_092(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 92)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 92)
        return False
    store.set(sku, level - qty)
    return True

def reserve_093(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 93)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 93)
        return False
    store.set(sku, level - qty)
    return True

def reserve_094(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 94)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 94)
        return False
    store.set(sku, level - qty)
    return True

def reserve_095(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 95)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 95)
        return False
    store.set(sku, level - qty)
    return True

def reserve_096(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 96)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 96)
        return False
    store.set(sku, level - qty)
    return True

def reserve_097(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 97)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 97)
        return False
    store.set(sku, level - qty)
    return True

def reserve_098(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 98)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 98)
        return False
    store.set(sku, level - qty)
    return True

def reserve_099(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 99)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 99)
        return False
    store.set(sku, level - qty)
    return True

def reserve_100(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 100)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 100)
        return False
    store.set(sku, level - qty)
    return True

def reserve_101(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 101)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 101)
        return False
    store.set(sku, level - qty)
    return True

def reserve_102(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 102)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 102)
        return False
    store.set(sku, level - qty)
    return True

def reserve_103(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 103)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 103)
        return False
    store.set(sku, level - qty)
    return True

def reserve_104(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 104)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 104)
        return False
    store.set(sku, level - qty)
    return True

def reserve_105(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 105)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 105)
        return False
    store.set(sku, level - qty)
    return True

def reserve_106(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 106)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 106)
        return False
    store.set(sku, level - qty)
    return True

def reserve_107(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 107)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 107)
        return False
    store.set(sku, level - qty)
    return True

def reserve_108(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 108)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 108)
        return False
    store.set(sku, level - qty)
    return True

def reserve_109(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 109)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 109)
        return False
    store.set(sku, level - qty)
    return True

def reserve_110(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 110)."""
    level = store.level(sku)
    if level < qty:
        store.log('short', sku, level, qty, 110)
        return False
    store.set(sku, level - qty)
    return True

def reserve_111(store, sku: str, qty: int) -> bool:
    """Reserve qty units of sku (variant 111)."""
    level = store.level(sku)

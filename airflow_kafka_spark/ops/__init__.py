"""Operations that change a checkpoint location: backup, restore, reset, their plans and journal."""
